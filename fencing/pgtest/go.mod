module github.com/dlmgo/dlm/fencing/pgtest

go 1.26.0

require (
	github.com/dlmgo/dlm v0.0.0-00010101000000-000000000000
	github.com/lib/pq v1.12.3
)

replace github.com/dlmgo/dlm => ../..
