# kernbayes developer targets.  `make demo` and `make check` are the README's
# two commands; each installs what it needs first.
PKG      := kernbayes
VERSION  := $(shell sed -n 's/^Version: *//p' DESCRIPTION)
TARBALL  := $(PKG)_$(VERSION).tar.gz
R        ?= R
RSCRIPT  ?= Rscript
# R packages the build, tests and vignettes need, and their Debian names.
RPKGS    := knitr rmarkdown roxygen2 coda posterior testthat MASS future future.apply \
            rstan brms bayesplot future.batchtools progressr quadprog
DEBPKGS  := r-cran-knitr r-cran-rmarkdown r-cran-roxygen2 r-cran-coda \
            r-cran-posterior r-cran-testthat r-cran-mass r-cran-future \
            r-cran-future.apply r-cran-rstan r-cran-brms r-cran-bayesplot \
            r-cran-future.batchtools r-cran-progressr r-cran-quadprog pandoc qpdf \
            pngquant
# R CMD INSTALL strips the shared object's debug information only
STRIP    := _R_SHLIB_STRIP_=true R_STRIP_SHARED_LIB="strip --strip-debug"
MISSING   = $(RSCRIPT) -e 'p <- strsplit("$(RPKGS)", " ")[[1]]; \
            m <- p[!vapply(p, requireNamespace, TRUE, quietly = TRUE)]; \
            for (b in c("pandoc", "qpdf", "pngquant")) if (!nzchar(Sys.which(b))) m <- c(m, b); \
            cat(m)'

# rstan compiles a model only when system.file("include", package = "BH")
# exists (its option boost_lib); Debian's r-cran-bh is an empty shell (the
# headers live in libboost-dev), so BH comes from CRAN into the first
# writable library that precedes the headerless copy (R_LIBS_USER, created,
# when there is none).  Silent when the headers are there.
BOOST     = if (!nzchar(system.file("include", package = "BH")) && \
              requireNamespace("rstan", quietly = TRUE)) { \
              libs <- .libPaths(); \
              i <- match(dirname(find.package("BH", quiet = TRUE))[1L], libs); \
              before <- if (is.na(i)) seq_along(libs) else seq_len(i - 1L); \
              ok <- libs[before][file.access(libs[before], 2L) == 0L]; \
              lib <- if (length(ok)) ok[1L] else Sys.getenv("R_LIBS_USER"); \
              dir.create(lib, recursive = TRUE, showWarnings = FALSE); \
              message("setup: BH has no Boost headers (rstan cannot compile models); installing BH from CRAN into ", lib); \
              utils::install.packages("BH", lib = lib, repos = "https://cloud.r-project.org", quiet = TRUE); \
              .libPaths(c(lib, .libPaths())); \
              if (!nzchar(system.file("include", package = "BH", lib.loc = lib))) \
                stop("setup: BH headers still missing after installing BH into ", lib); \
            }

.PHONY: setup install demo check check-cran lint test valgrind bench document clean $(TARBALL)

# Debian's prebuilt packages install in seconds; CRAN is the fallback.
setup:
	@missing="$$($(MISSING))"; \
	if [ -n "$$missing" ]; then \
	  echo "setup: installing $$missing"; \
	  if command -v apt-get >/dev/null 2>&1 && [ "$$(id -u)" = 0 ]; then \
	    apt-get update -qq && \
	    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $(DEBPKGS) >/dev/null; \
	  fi; \
	  missing="$$($(MISSING))"; \
	  if [ -n "$$missing" ]; then \
	    $(RSCRIPT) -e 'p <- setdiff(strsplit("'"$$missing"'", " ")[[1]], c("pandoc", "qpdf", "pngquant")); \
	      if (length(p)) install.packages(p, repos = "https://cloud.r-project.org")'; \
	  fi; \
	fi
	@$(RSCRIPT) -e '$(BOOST)'

# from the built tarball, so that the vignettes are installed and listed by
# vignette(package = "kernbayes")
install: $(TARBALL)
	$(STRIP) $(R) CMD INSTALL --preclean $(TARBALL)

demo: install
	$(RSCRIPT) inst/scripts/demo.R demo-output

document: setup
	$(RSCRIPT) -e 'roxygen2::roxygenise()'

# always rebuilt (phony): a tarball left from an earlier build would hold
# older sources
$(TARBALL): setup
	rm -f $(PKG)_*.tar.gz
	$(R) CMD build .

# R CMD check --as-cran with tests and vignettes; fails on any ERROR or
# WARNING (R CMD check itself only fails on errors).
# $(STRIP): the shared object is installed without its debug information
# (0.87 MB -> 0.24 MB), its symbol table kept (check's "compiled code" step
# reads it with nm; R's default, strip --strip-unneeded, removes it).
# NOT_CRAN=true: the snapshot, multisession and subprocess tests (the
# crash-prone bad-input cases, Ctrl-C in child processes) run here too.
check: $(TARBALL)
	NOT_CRAN=true _R_CHECK_CRAN_INCOMING_REMOTE_=false _R_CHECK_FORCE_SUGGESTS_=true \
	_R_CHECK_FUTURE_FILE_TIMESTAMPS_=false $(STRIP) \
	  $(R) CMD check --as-cran --no-manual $(TARBALL); status=$$?; \
	  cat $(PKG).Rcheck/tests/testthat.Rout* 2>/dev/null | grep -E '^\[ FAIL' | tail -n 1; \
	  if [ $$status -ne 0 ]; then exit $$status; fi; \
	  if grep -qE '^Status:.*(ERROR|WARNING)' $(PKG).Rcheck/00check.log; then \
	    echo "check: R CMD check reported a WARNING or ERROR"; exit 1; fi

# The same check under CRAN's conditions (NOT_CRAN unset: the heavy tests
# skip; about 2 minutes of test CPU); not run by CI.
check-cran: $(TARBALL)
	env -u NOT_CRAN _R_CHECK_CRAN_INCOMING_REMOTE_=false _R_CHECK_FORCE_SUGGESTS_=true \
	_R_CHECK_FUTURE_FILE_TIMESTAMPS_=false $(STRIP) \
	  $(R) CMD check --as-cran --no-manual $(TARBALL)

# ARCHITECTURE.md's rules, checked by tools/lint.R (base R only; no
# install): one line per violation, non-zero exit when there is any.
lint:
	$(RSCRIPT) tools/lint.R

# tests against the installed package, without the full check
test: install
	cd tests && NOT_CRAN=true $(RSCRIPT) testthat.R

# tests under valgrind memcheck; non-zero exit on any memory error.  The
# large statistical tests are skipped (KB_VALGRIND): about 20-30 minutes.
valgrind: install
	cd tests && KB_VALGRIND=1 $(R) -d "valgrind --tool=memcheck --error-exitcode=1 \
	  --leak-check=full --errors-for-leak-kinds=definite" --vanilla -f testthat.R

bench: install
	@for f in inst/bench/bench-*.R; do echo "== $$f"; $(RSCRIPT) $$f || exit 1; done

clean:
	rm -rf $(PKG).Rcheck $(PKG)_*.tar.gz demo-output src/*.o src/*.so
