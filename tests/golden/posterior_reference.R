# R's reference values of hawkes-diagnose's convergence statistics and summaries.
#
# Reads posterior_draws.csv.gz (written by posterior_draws.py), computes for every case what
# hawkes-diagnose reports -- posterior's rhat, ess_bulk, ess_tail, mcse_mean (and ess_mean),
# and the summaries median, 2.5% and 97.5% quantiles, mean and sd -- and writes
# posterior_reference.json next to this file. tests/test_posterior_reference.py compares
# hawkes_cli.diagnostics.stats with it (no R needed there).
#
# Regenerate (Debian: apt-get install -y r-base-core r-cran-posterior r-cran-jsonlite):
#
#     nice Rscript tests/golden/posterior_reference.R
#
# A case's draws form an iterations x chains matrix, the form posterior's functions take.
# Cases of several chains with 2 or 3 draws are not made: posterior 1.4.0's .split_chains
# then drops the matrix to vectors (x[1, ] of a matrix) and binds them the wrong way round,
# giving an R-hat of the chains' first and last draws instead of NA.

suppressPackageStartupMessages({
  library(posterior)
  library(jsonlite)
})

args <- commandArgs(trailingOnly = FALSE)
here <- dirname(normalizePath(sub("^--file=", "", args[grep("^--file=", args)])))

con <- gzfile(file.path(here, "posterior_draws.csv.gz"))
lines <- readLines(con)
close(con)
stopifnot(lines[1] == "case,log2_scale,chain,draws")
cases <- list()
for (line in lines[-1]) {
  parts <- strsplit(line, ",", fixed = TRUE)[[1]]
  ks <- strsplit(parts[4], " ", fixed = TRUE)[[1]]
  values <- if (parts[2] == "hex") {
    as.numeric(ks)                                   # C99 hexadecimal floats, read exactly
  } else {
    as.numeric(ks) * 2^as.numeric(parts[2])          # exact: k < 2^53, a power-of-two scale
  }
  case <- parts[1]
  cases[[case]] <- cbind(cases[[case]], values)     # chains in file order
}

num <- function(v) if (is.na(v)) NA else unname(v)

out <- list(
  r_version = R.version.string,
  posterior_version = as.character(packageVersion("posterior")),
  cases = list()
)
for (case in names(cases)) {
  x <- unname(cases[[case]])
  finite <- x[is.finite(x)]
  q <- if (length(finite)) quantile(finite, c(0.5, 0.025, 0.975), names = FALSE) else rep(NA, 3)
  out$cases[[case]] <- list(
    chains = ncol(x),
    draws = nrow(x),
    rhat = num(suppressWarnings(rhat(x))),
    ess_bulk = num(suppressWarnings(ess_bulk(x))),
    ess_tail = num(suppressWarnings(ess_tail(x))),
    ess_mean = num(suppressWarnings(ess_mean(x))),
    mcse_mean = num(suppressWarnings(mcse_mean(x))),
    median = num(q[1]),
    q2_5 = num(q[2]),
    q97_5 = num(q[3]),
    mean = if (length(finite)) mean(finite) else NA,
    sd = if (length(finite) > 1) sd(finite) else NA
  )
}
writeLines(
  toJSON(out, auto_unbox = TRUE, digits = NA, na = "null", pretty = TRUE),
  file.path(here, "posterior_reference.json")
)
cat("wrote", file.path(here, "posterior_reference.json"), length(cases), "cases\n")
