// Package box puts a string into an interface value without copying it to
// the heap, for the drivers whose clients take command arguments as []any:
// any(s) allocates a copy of the string's header for each argument.
package box

import "unsafe"

// String returns *s as an interface value that holds the string at s
// rather than a copy of it: to its reader it is a string like any other.
// *s must not change, and must stay reachable, while the value is used.
// It relies on the layout of an interface value (a type word, then a
// pointer to the value), which TestString checks.
func String(s *string) any {
	var v any
	e := (*[2]unsafe.Pointer)(unsafe.Pointer(&v))
	e[0], e[1] = stringType, unsafe.Pointer(s)
	return v
}

// stringType is the type word of an interface value that holds a string.
var stringType = func() unsafe.Pointer {
	v := any("")
	return (*[2]unsafe.Pointer)(unsafe.Pointer(&v))[0]
}()
