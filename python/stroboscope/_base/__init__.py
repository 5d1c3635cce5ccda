"""The stdlib leaves every room may use: files, lifecycle, rate-limited logging, identity,
checks, the version. They import nothing of ours."""
