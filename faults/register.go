package faults

import (
	"fmt"
	"net"
	"net/http"
	"strconv"
	"sync"
)

// A register is the storage the locks protect: it keeps, for each lock key,
// the largest fence it has accepted and refuses a write with a smaller
// one. It serves
// POST /write?c=<client>&op=<attempt>&n=<write>&f=<fence>&k=<key> over
// HTTP (200 accepted, 409 refused) and records every decision. A fence is
// only compared with those of its own key: a semaphore's permits are locks
// of their own, each with its own fences.
//
// With a store (Cell.Register), the store decides each write instead
// (storeWrite), and a write it failed (outcome unknown) is answered 503
// and recorded as RegError; one the client gave up on before it was
// written, as RegCancel.
type register struct {
	store  store // nil: the register's own map decides
	mu     sync.Mutex
	max    map[string]uint64
	events []Event
	srv    *http.Server
	Addr   string
}

func startRegister(ip string, st store) (*register, error) {
	l, err := net.Listen("tcp", net.JoinHostPort(ip, "0"))
	if err != nil {
		return nil, err
	}
	r := &register{Addr: l.Addr().String(), max: map[string]uint64{}, store: st}
	r.srv = &http.Server{Handler: http.HandlerFunc(r.write)}
	go func() { _ = r.srv.Serve(l) }()
	return r, nil
}

func (r *register) write(w http.ResponseWriter, req *http.Request) {
	q := req.URL.Query()
	c, err1 := strconv.Atoi(q.Get("c"))
	op, err2 := strconv.Atoi(q.Get("op"))
	n, err4 := strconv.Atoi(q.Get("n"))
	f, err3 := strconv.ParseUint(q.Get("f"), 10, 64)
	if err1 != nil || err2 != nil || err3 != nil || err4 != nil {
		http.Error(w, "bad write", http.StatusBadRequest)
		return
	}
	k := q.Get("k")
	if r.store != nil {
		e, err := r.storeWrite(req.Context(), k, f, c, op, n)
		switch {
		case err != nil:
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
		case e.Kind == RegRefuse:
			http.Error(w, fmt.Sprintf("fence %d refused by the store", f), http.StatusConflict)
		}
		return
	}
	r.mu.Lock()
	e := Event{T: now(), Client: c, Op: op, N: n, Fence: f, Key: k, Kind: RegAccept}
	max := r.max[k]
	if f < max {
		e.Kind = RegRefuse
	} else {
		r.max[k] = f
	}
	r.events = append(r.events, e)
	r.mu.Unlock()
	if e.Kind == RegRefuse {
		http.Error(w, fmt.Sprintf("fence %d is below %d", f, max), http.StatusConflict)
	}
}

// history returns what the register decided so far.
func (r *register) history() []Event {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Event(nil), r.events...)
}

func (r *register) close() { _ = r.srv.Close() }
