package dlm

// A Node that wraps another Node (for metrics, logging or fault injection)
// implements Unwrap so that optional abilities of the wrapped Node stay
// reachable:
//
//	Unwrap() Node
//
// Code that looks for an optional ability calls [NodeAs] rather than a bare
// type assertion. A wrapper that must see the calls an ability makes (a fault
// injector, a metrics wrapper) implements that ability itself; NodeAs finds
// the outermost implementation first.

// NodeAs reports whether n, or a Node it wraps, implements T, and returns the
// outermost one that does. It follows Unwrap() Node methods and stops at a
// nil Node or after 100 levels.
func NodeAs[T any](n Node) (T, bool) {
	for range 100 {
		if n == nil {
			break
		}
		if a, ok := n.(T); ok {
			return a, true
		}
		u, ok := n.(interface{ Unwrap() Node })
		if !ok {
			break
		}
		n = u.Unwrap()
	}
	var zero T
	return zero, false
}
