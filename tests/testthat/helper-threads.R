# Tests compare 1 and 2 threads: keep the asked-for team whatever the
# machine's load (kernbayes.follow_load, ?kernbayes "Threads"), so that
# the 2-thread paths run on 2 threads even on a busy machine.
options(kernbayes.follow_load = FALSE)
