package fencing

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"

	"github.com/dlmgo/dlm"
)

// The headers that carry a lock's key (percent-encoded, as url.PathEscape
// does) and fence (decimal) with a request.
const (
	HeaderKey   = "Dlm-Fence-Key"
	HeaderFence = "Dlm-Fence"
)

// SetHeader sets the headers that carry key and fence on req.
func SetHeader(req *http.Request, key string, fence uint64) error {
	if err := check(key, fence); err != nil {
		return err
	}
	req.Header.Set(HeaderKey, url.PathEscape(key))
	req.Header.Set(HeaderFence, strconv.FormatUint(fence, 10))
	return nil
}

// A Fenced is what Transport needs of a lock; *dlm.Lock is one.
type Fenced interface {
	Key() string
	Fence() uint64
}

// Transport is an http.RoundTripper that sends Lock's key and fence with
// every request (on a clone: the caller's request is not changed).
type Transport struct {
	Lock Fenced
	Base http.RoundTripper // nil means http.DefaultTransport
}

// RoundTrip implements http.RoundTripper.
func (t *Transport) RoundTrip(req *http.Request) (*http.Response, error) {
	r := req.Clone(req.Context())
	if err := SetHeader(r, t.Lock.Key(), t.Lock.Fence()); err != nil {
		if req.Body != nil {
			_ = req.Body.Close() // a RoundTripper closes the body, even on errors
		}
		return nil, err
	}
	base := t.Base
	if base == nil {
		base = http.DefaultTransport
	}
	return base.RoundTrip(r)
}

// FromRequest returns the key and fence a request carries, and whether
// it carries both headers.
func FromRequest(r *http.Request) (key string, fence uint64, ok bool, err error) {
	k, f := r.Header.Get(HeaderKey), r.Header.Get(HeaderFence)
	if k == "" && f == "" {
		return "", 0, false, nil
	}
	if k == "" || f == "" {
		return "", 0, false, fmt.Errorf("%w: fencing: %s and %s go together", dlm.ErrInvalid, HeaderKey, HeaderFence)
	}
	if len(k) > 3*MaxResource {
		return "", 0, false, fmt.Errorf("%w: fencing: %s of %d bytes", dlm.ErrInvalid, HeaderKey, len(k))
	}
	key, err = url.PathUnescape(k)
	if err != nil {
		return "", 0, false, fmt.Errorf("%w: fencing: %s: %w", dlm.ErrInvalid, HeaderKey, err)
	}
	fence, err = strconv.ParseUint(f, 10, 64)
	if err != nil {
		return "", 0, false, fmt.Errorf("%w: fencing: %s: %w", dlm.ErrInvalid, HeaderFence, err)
	}
	if err := check(key, fence); err != nil {
		return "", 0, false, err
	}
	return key, fence, true, nil
}

type ctxKey struct{}

type fenceOf struct {
	key   string
	fence uint64
}

// FromContext returns the key and fence that Middleware accepted for the
// request whose context ctx is.
func FromContext(ctx context.Context) (key string, fence uint64, ok bool) {
	v, ok := ctx.Value(ctxKey{}).(fenceOf)
	return v.key, v.fence, ok
}

// Middleware refuses requests whose fence is smaller than the largest
// store has recorded for their key, and records the fence of the others
// before calling next:
//
//   - 409 Conflict: a larger fence was recorded (ErrStale);
//   - 428 Precondition Required: the request carries no fence headers;
//   - 400 Bad Request: the headers are malformed (or the key too long,
//     or the fence 0);
//   - 503 Service Unavailable: the store failed.
//
// The check admits requests in fence order; it does not hold back a
// request admitted earlier whose handler is still running. A handler whose
// write must itself be refused once a larger fence is seen writes through
// a fenced store (SQL.Check, Redis) with the key and fence of
// FromContext.
func Middleware(store Store, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		key, fence, ok, err := FromRequest(r)
		switch {
		case err != nil:
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		case !ok:
			http.Error(w, "fencing: the request carries no "+HeaderKey+" and "+HeaderFence, http.StatusPreconditionRequired)
			return
		}
		if err := store.Advance(r.Context(), key, fence); err != nil {
			switch {
			case errors.Is(err, ErrStale):
				http.Error(w, err.Error(), http.StatusConflict)
			case errors.Is(err, dlm.ErrInvalid):
				http.Error(w, err.Error(), http.StatusBadRequest)
			default:
				http.Error(w, "fencing: store: "+err.Error(), http.StatusServiceUnavailable)
			}
			return
		}
		next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), ctxKey{}, fenceOf{key, fence})))
	})
}
