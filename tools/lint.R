# Checks ARCHITECTURE.md's rules ("Floors" and "Rules") mechanically.
# Run from the package root: `make lint` or `Rscript tools/lint.R`.
# Base R, tools and utils only.  Prints one line per violation,
# "file:line: rule: detail", and exits with status 1 when there is any.

## The floors of src/, bottom (1) to top; ARCHITECTURE.md, "Floors".  A
## file includes only headers of its own floor or of floors below it.  Keep
## this table and that diagram in step when a file moves or is added.
FLOORS <- list(
  util       = list(level = 1L, files = c("util.c", "kernbayes.h")),
  args       = list(level = 2L, files = c("args.c", "args.h")),
  runtime    = list(level = 3L, files = c("runtime.c", "runtime.h")),
  linalg     = list(level = 4L, files = c("linalg.c", "linalg.h")),
  callback   = list(level = 5L, files = c("callback.c", "callback.h")),
  kernels    = list(level = 6L, files = c("kernels.c", "kernels.h")),
  stein      = list(level = 7L, files = c("stein.c", "stein.h", "stein_imq.h")),
  # algorithms: one floor, but a file includes no other algorithm's header
  # (ALGO_JOINS below lists the documented exceptions)
  algorithms = list(level = 8L, files = c(
    "thin.c", "kt.c", "weights.c", "gof.c", "fssd.c", "ksdt.c", "ksdt.h",
    "spmcmc.c", "samplers.c", "samplers.h", "kbr.c", "kbrcv.c", "flows.c",
    "assign.c", "goodwin.c")),
  # the entries' registration; entries.h declares every .Call entry and is
  # included by init.c and by each file that defines an entry
  entries    = list(level = 9L, files = c("init.c", "entries.h"))
)
# ARCHITECTURE.md: "spmcmc.c includes ksdt.h and samplers.h and is the only
# file that joins a sampler to a dictionary".
ALGO_JOINS <- list(spmcmc.c = c("ksdt.h", "samplers.h"))

## `#pragma omp` other than `simd` opens threads; ARCHITECTURE.md, "Rules"
## (Runtime): a parallel loop is a kb_loop.  The documented exceptions, by
## file and enclosing function, each with its reason.
OMP_EXCEPTIONS <- list(
  list(file = "runtime.c", fun = "kb_loop_run",
       why = "kb_loop itself: the chunked parallel loop (dynamic, static)"),
  list(file = "kbrcv.c", fun = "kcv_rounds",
       why = "kbr_cv's (fold, eps) pairs, thread-safe LAPACK wrappers only"),
  list(file = "thin.c", fun = "greedy_argmin",
       why = "greedy thinning's per-step region (kb_threads_min, KB_PAR_MIN_STEP)"),
  list(file = "ksdt.c", fun = "dict_row",
       why = "KSDT's per-pass region (kb_threads_min, KSDT_PAR_MIN_PASS)"),
  list(file = "ksdt.c", fun = "pass",
       why = "KSDT's per-pass region (kb_threads_min, KSDT_PAR_MIN_PASS)")
)
# `#pragma omp simd` is a vectorisation hint (no threads): allowed anywhere.

## More than LIMIT_PARAMS parameters: the documented exceptions (ARCHITECTURE.md,
## "Parameters"), by file and function, each with its reason.
PARAM_EXCEPTIONS <- list(
  list(file = "stein_imq.h", fun = "SV_BODY",
       why = paste("the always-inline IMQ Stein template: its last two parameters",
                   "(d, iso) are compile-time constants at each call, so the",
                   "compiler specialises the SIMD loop on them; a struct would hide them"))
)

LIMIT_FUN_LINES <- 80L     # a C function, signature to closing brace
LIMIT_ENTRY_LINES <- 40L   # a .Call entry: kb_* returning SEXP
LIMIT_PARAMS <- 8L         # a C function; an internal R function
RUNTIME_ONLY <- c("R_CheckUserInterrupt", "omp_get_thread_num")

violations <- character()
report <- function(file, line, rule, detail)
  violations <<- c(violations, sprintf("%s:%d: %s: %s", file, line, rule, detail))

## C source without comments, strings and preprocessor lines (each replaced
## by blanks, newlines kept, so offsets keep their lines).  Of an
## #if/#elif/#else chain only the first branch is kept, so that braces
## opened in two branches are not counted twice.
c_code <- function(lines) {
  keep <- rep(TRUE, length(lines))
  skip <- logical()          # per open #if: skipping its later branches?
  cont <- FALSE
  for (i in seq_along(lines)) {
    l <- lines[i]
    if (cont) {
      cont <- grepl("\\\\\\s*$", l); lines[i] <- ""; next
    }
    if (grepl("^\\s*#", l)) {
      d <- sub("^\\s*#\\s*([a-z]*).*$", "\\1", l)
      if (d %in% c("if", "ifdef", "ifndef")) skip <- c(skip, FALSE)
      else if (d %in% c("else", "elif") && length(skip)) skip[length(skip)] <- TRUE
      else if (d == "endif" && length(skip)) skip <- skip[-length(skip)]
      cont <- grepl("\\\\\\s*$", l)
      lines[i] <- ""
      next
    }
    if (any(skip)) lines[i] <- ""
  }
  ch <- utf8ToInt(paste(lines, collapse = "\n"))
  out <- ch
  nl <- 10L; sl <- 47L; st <- 42L; dq <- 34L; sq <- 39L; bs <- 92L; sp <- 32L
  i <- 1L; n <- length(ch)
  while (i <= n) {
    c0 <- ch[i]
    if (c0 == sl && i < n && ch[i + 1L] == st) {          # /* ... */
      j <- i + 2L
      while (j < n && !(ch[j] == st && ch[j + 1L] == sl)) j <- j + 1L
      idx <- i:min(j + 1L, n); out[idx[ch[idx] != nl]] <- sp; i <- j + 2L
    } else if (c0 == sl && i < n && ch[i + 1L] == sl) {   # // ...
      j <- i
      while (j <= n && ch[j] != nl) j <- j + 1L
      out[i:(j - 1L)] <- sp; i <- j
    } else if (c0 == dq || c0 == sq) {                    # "..." or '.'
      j <- i + 1L
      while (j <= n && ch[j] != c0) j <- j + if (ch[j] == bs) 2L else 1L
      out[i:min(j, n)] <- sp; i <- j + 1L
    } else i <- i + 1L
  }
  out
}

## Split a parameter list at its top-level commas.
split_params <- function(s) {
  ch <- strsplit(s, "")[[1]]
  depth <- cumsum((ch == "(") - (ch == ")"))
  cut <- which(ch == "," & depth == 0L)
  parts <- substring(s, c(1L, cut + 1L), c(cut - 1L, nchar(s)))
  parts <- trimws(gsub("\\s+", " ", parts))
  if (length(parts) == 1L && parts %in% c("", "void")) character() else parts
}

## The function definitions of one C file: name, first and last line,
## parameters, return type.  A definition is a top-level `{` whose
## declaration (since the previous top-level `;` or `}`) ends with `)`.
c_functions <- function(lines) {
  code <- c_code(lines)
  line_of <- cumsum(c(1L, code[-length(code)] == 10L))  # of each character
  open <- code == 123L; close <- code == 125L
  depth <- cumsum(open - close)                 # depth after each char
  before <- depth - open + close                # depth before each char
  top_open <- which(open & before == 0L)
  term <- which((code == 59L & depth == 0L) | (close & depth == 0L))
  txt <- intToUtf8(code, multiple = TRUE)
  res <- list()
  for (o in top_open) {
    e <- o + which(depth[o:length(depth)] == 0L)[1L] - 1L
    s <- max(c(0L, term[term < o])) + 1L
    decl <- paste(txt[s:(o - 1L)], collapse = "")
    if (!grepl("\\)\\s*$", decl)) next
    dch <- strsplit(decl, "")[[1]]
    last <- max(which(dch == ")"))
    # matching "(": scanning back from the last ")"
    lev <- 0L; k <- last
    repeat {
      if (dch[k] == ")") lev <- lev + 1L
      if (dch[k] == "(") lev <- lev - 1L
      if (lev == 0L) break
      k <- k - 1L
    }
    head <- sub("\\s+$", "", paste(dch[seq_len(k - 1L)], collapse = ""))
    name <- regmatches(head, regexpr("[A-Za-z_][A-Za-z0-9_]*$", head))
    if (!length(name)) next
    first <- s - 1L + regexpr("\\S", decl)
    res[[length(res) + 1L]] <- list(
      name = name, start = line_of[first], end = line_of[e],
      params = split_params(paste(dch[(k + 1L):(last - 1L)], collapse = "")),
      type = sub("[A-Za-z_][A-Za-z0-9_]*$", "", head))
  }
  res
}

src_files <- sort(c(Sys.glob("src/*.c"), Sys.glob("src/*.h")))
floor_of <- function(f) {
  for (nm in names(FLOORS)) if (f %in% FLOORS[[nm]]$files) return(nm)
  NA_character_
}

for (path in src_files) {
  f <- basename(path)
  lines <- readLines(path, warn = FALSE)
  fl <- floor_of(f)
  if (is.na(fl)) {
    report(path, 1L, "floors", "file not in tools/lint.R's FLOORS table")
    next
  }
  funs <- c_functions(lines)
  entries_here <- any(vapply(funs, function(x)
    startsWith(x$name, "kb_") && grepl("\\bSEXP\\b", x$type), TRUE))

  ## includes by floor
  inc <- grep('^\\s*#\\s*include\\s+"', lines)
  for (i in inc) {
    h <- sub('^\\s*#\\s*include\\s+"([^"]+)".*$', "\\1", lines[i])
    hf <- floor_of(h)
    ok <- if (h == "entries.h") f %in% c("init.c") || entries_here
          else if (is.na(hf)) FALSE
          else if (FLOORS[[hf]]$level < FLOORS[[fl]]$level) TRUE
          else if (hf != fl) FALSE
          else if (fl != "algorithms") TRUE
          else sub("\\.[ch]$", "", h) == sub("\\.[ch]$", "", f) ||
               h %in% ALGO_JOINS[[f]]
    if (!ok) {
      why <- if (h == "entries.h") "but defines no .Call entry"
             else if (is.na(hf)) "(header not in FLOORS)"
             else sprintf("(floor %s) from floor %s", hf, fl)
      report(path, i, "include-floor", paste("includes", h, why))
    }
  }

  ## function lengths and parameters
  for (fn in funs) {
    len <- fn$end - fn$start + 1L
    entry <- startsWith(fn$name, "kb_") && grepl("\\bSEXP\\b", fn$type)
    lim <- if (entry) LIMIT_ENTRY_LINES else LIMIT_FUN_LINES
    if (len > lim)
      report(path, fn$start, if (entry) "entry-length" else "function-length",
             sprintf("%s is %d lines (limit %d)", fn$name, len, lim))
    np <- length(fn$params)
    excused <- any(vapply(PARAM_EXCEPTIONS, function(x)
      identical(x$file, f) && identical(x$fun, fn$name), logical(1)))
    if (np > LIMIT_PARAMS && !excused)
      report(path, fn$start, "c-params",
             sprintf("%s takes %d parameters (limit %d)", fn$name, np, LIMIT_PARAMS))
  }

  ## runtime-only calls
  code_lines <- strsplit(intToUtf8(c_code(lines)), "\n", fixed = TRUE)[[1]]
  if (f != "runtime.h") for (w in RUNTIME_ONLY) {
    hit <- grep(paste0("\\b", w, "\\b"), code_lines)
    for (i in hit) report(path, i, "runtime-only", paste(w, "outside runtime.h"))
  }

  ## OpenMP regions
  prag <- grep("^\\s*#\\s*pragma\\s+omp\\b", lines)
  prag <- prag[!grepl("^\\s*#\\s*pragma\\s+omp\\s+simd\\b", lines[prag])]
  for (i in prag) {
    inside <- Filter(function(x) x$start <= i && i <= x$end, funs)
    fun <- if (length(inside)) inside[[1]]$name else NA_character_
    ok <- any(vapply(OMP_EXCEPTIONS, function(x)
      x$file == f && identical(x$fun, fun), TRUE))
    if (!ok)
      report(path, i, "omp-region", sprintf(
        "#pragma omp in %s, not a documented exception (kb_loop)",
        if (is.na(fun)) "no function" else fun))
  }
}

## R: parameters of internal functions; exports documented
ns <- parseNamespaceFile(basename(getwd()), "..")
exports <- ns$exports
s3 <- if (length(ns$S3methods))
  paste(ns$S3methods[, 1], ns$S3methods[, 2], sep = ".") else character()
for (path in sort(Sys.glob("R/*.R"))) {
  exprs <- parse(path, keep.source = TRUE)
  refs <- attr(exprs, "srcref")
  for (k in seq_along(exprs)) {
    e <- exprs[[k]]
    if (!is.call(e) || !as.character(e[[1]]) %in% c("<-", "=") ||
        !is.name(e[[2]]) || !is.call(e[[3]]) ||
        !identical(e[[3]][[1]], as.name("function"))) next
    name <- as.character(e[[2]])
    if (name %in% exports || name %in% s3) next
    np <- length(e[[3]][[2]])
    if (np > LIMIT_PARAMS)
      report(path, refs[[k]][1L], "r-params",
             sprintf("%s takes %d parameters (limit %d)", name, np, LIMIT_PARAMS))
  }
}

aliases <- unlist(lapply(Sys.glob("man/*.Rd"), function(p) {
  l <- readLines(p, warn = FALSE)
  a <- regmatches(l, regexpr("^\\\\alias\\{[^}]*\\}", l))
  sub("^\\\\alias\\{([^}]*)\\}$", "\\1", a)
}))
nsl <- readLines("NAMESPACE")
for (x in setdiff(exports, aliases))
  report("NAMESPACE", match(paste0("export(", x, ")"), nsl),
         "export-doc", paste(x, "has no \\alias in man/*.Rd"))

if (length(violations)) {
  writeLines(violations)
  message(sprintf("lint: %d violation%s", length(violations),
                  if (length(violations) == 1L) "" else "s"))
  quit(status = 1L)
}
message("lint: no violations")
