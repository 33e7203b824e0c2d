module github.com/dlmgo/dlm/tools/release

go 1.26.0

require (
	github.com/google/licensecheck v0.3.1
	golang.org/x/mod v0.43.0
)
