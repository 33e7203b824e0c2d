package faults

import (
	"golang.org/x/sys/unix"
)

// An Event is one step of a client, of the register, or of the nemesis,
// stamped with the machine's monotonic clock (CLOCK_MONOTONIC, which every
// process of the machine shares).
type Event struct {
	T      int64  `json:"t"`           // nanoseconds on the monotonic clock
	Client int    `json:"c,omitempty"` // 1-based; 0 for the nemesis
	Kind   Kind   `json:"k"`
	Op     int    `json:"op,omitempty"` // the client's attempt number
	N      int    `json:"n,omitempty"`  // a write's number within the attempt (1 or 2)
	Fence  uint64 `json:"f,omitempty"`
	Key    string `json:"key,omitempty"` // the lock's key (a semaphore's permit, one of a multi-key lock's), on a lock's events but Release and Released, which are the attempt's
	Until  int64  `json:"u,omitempty"`   // Granted, Renewed: the lease's end on the monotonic clock
	Info   string `json:"i,omitempty"`   // an error, or what the nemesis did
}

// A Kind says what an Event records.
type Kind string

// What clients, the register and the nemesis record.
const (
	Acquire  Kind = "acquire"  // a client calls Lock
	Granted  Kind = "granted"  // Lock returned a lock (Fence, Until)
	Failed   Kind = "failed"   // Lock returned an error (Info)
	Renewed  Kind = "renewed"  // the lease was renewed (Until)
	Ended    Kind = "ended"    // the lock's Context ended
	Write    Kind = "write"    // a holder sends a write with its fence
	Accepted Kind = "accepted" // the holder heard the register accept it
	Refused  Kind = "refused"  // the holder heard the register refuse it (a smaller fence than one seen)
	Unknown  Kind = "unknown"  // the write's outcome never reached the holder
	Release  Kind = "release"  // a holder calls Unlock
	Released Kind = "released" // Unlock returned (Info: its error)

	RegAccept Kind = "reg-accept" // the register accepted a write (Client, Op, N, Fence)
	RegRefuse Kind = "reg-refuse" // the register refused one
	RegError  Kind = "reg-error"  // the register's store failed a write (Info): its outcome is unknown
	RegCancel Kind = "reg-cancel" // the client gave the write up before its store wrote it: not written

	Fault Kind = "fault" // the nemesis starts a fault (Info)
	Heal  Kind = "heal"  // the nemesis ends it
	Note  Kind = "note"  // the nemesis saw something worth keeping (Info)
)

// A Granted event's Info.
const (
	grantedLong      = "long"    // the holder nemeses' long hold, asked for by SIGUSR1
	grantedHandedOff = "handoff" // handed over by an Unlock of the client's process
)

// now reads the monotonic clock.
func now() int64 {
	var ts unix.Timespec
	_ = unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts)
	return ts.Nano()
}
