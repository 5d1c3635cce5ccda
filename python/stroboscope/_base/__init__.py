"""The stdlib leaves every room may use: files, lifecycle, rate-limited logging, identity,
checks, the version, a small HTTP server. They import nothing of ours."""
