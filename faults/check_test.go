package faults

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// The checker counts what it claims to, on histories written by hand.
func TestCheck(t *testing.T) {
	ev := func(tm int64, c int, k Kind, op int, f uint64, until int64) Event {
		return Event{T: tm, Client: c, Kind: k, Op: op, Fence: f, Until: until, N: 1}
	}
	clean := []Event{
		ev(0, 1, Acquire, 1, 0, 0), ev(1, 1, Granted, 1, 5, 100), ev(2, 1, Write, 1, 5, 0), ev(3, 1, RegAccept, 1, 5, 0),
		ev(4, 1, Accepted, 1, 5, 0), ev(5, 1, Release, 1, 0, 0),
		ev(3, 2, Acquire, 1, 0, 0), ev(6, 2, Granted, 1, 6, 100), ev(7, 2, Release, 1, 0, 0),
	}
	sortEvents(clean)
	if c := Check(clean); c.Violations() != 0 || c.Grants != 2 || c.Linearizable != "Ok" {
		t.Errorf("clean history: %+v", c)
	}
	// Client 2 granted while client 1's lease runs, with a smaller fence,
	// and client 1's write lands after client 2's grant.
	bad := []Event{
		ev(0, 1, Acquire, 1, 0, 0), ev(1, 1, Granted, 1, 5, 100), ev(10, 1, Write, 1, 5, 0),
		ev(2, 2, Acquire, 1, 0, 0), ev(5, 2, Granted, 1, 5, 100),
		ev(6, 3, Acquire, 1, 0, 0), ev(7, 3, Granted, 1, 9, 100),
		ev(11, 1, RegAccept, 1, 5, 0), ev(12, 1, Accepted, 1, 5, 0),
		ev(200, 1, Release, 1, 0, 0), ev(201, 2, Release, 1, 0, 0), ev(202, 3, Release, 1, 0, 0),
	}
	sortEvents(bad)
	c := Check(bad)
	if c.Overlaps != 2 || c.FenceRegressions != 1 || c.LostWrites != 1 {
		t.Errorf("bad history: %+v, want 2 overlaps, 1 fence regression, 1 lost write", c)
	}
	// The register accepting a smaller fence after a larger one is not
	// linearizable.
	nonlin := []Event{
		ev(0, 1, Write, 1, 9, 0), ev(1, 1, Accepted, 1, 9, 0),
		ev(2, 2, Write, 1, 3, 0), ev(3, 2, Accepted, 1, 3, 0),
	}
	if c := Check(nonlin); c.Linearizable != "Illegal" {
		t.Errorf("a register that accepted fence 3 after 9: %q", c.Linearizable)
	}
}

// A semaphore's permits are locks of their own: holders of different
// permits may overlap, and their fences, writes and registers are compared
// per permit; the most holders at once is what the promise bounds.
func TestCheckPermits(t *testing.T) {
	ev := func(tm int64, c int, k Kind, op int, f uint64, until int64, key string) Event {
		return Event{T: tm, Client: c, Kind: k, Op: op, Fence: f, Until: until, N: 1, Key: key}
	}
	// Clients 1 and 2 hold permits a and b at once, with fences of their
	// own counters; client 3 takes a after 1 released it.
	two := []Event{
		ev(0, 1, Acquire, 1, 0, 0, ""), ev(1, 1, Granted, 1, 7, 100, "a"), ev(2, 1, Write, 1, 7, 0, "a"), ev(3, 1, RegAccept, 1, 7, 0, "a"), ev(4, 1, Accepted, 1, 7, 0, "a"),
		ev(0, 2, Acquire, 1, 0, 0, ""), ev(2, 2, Granted, 1, 3, 100, "b"), ev(5, 2, Write, 1, 3, 0, "b"), ev(6, 2, RegAccept, 1, 3, 0, "b"), ev(7, 2, Accepted, 1, 3, 0, "b"),
		ev(8, 1, Release, 1, 0, 0, ""),
		ev(6, 3, Acquire, 1, 0, 0, ""), ev(9, 3, Granted, 1, 8, 100, "a"), ev(10, 3, Release, 1, 0, 0, ""),
		ev(11, 2, Release, 1, 0, 0, ""),
	}
	sortEvents(two)
	c := Check(two)
	if c.Violations() != 0 || c.MostHolders != 2 || c.Linearizable != "Ok" {
		t.Errorf("two permits: %+v, want no violation and 2 holders at most", c)
	}
	p := Cell{Strategy: "single", Nemesis: "none", Primitive: "semaphore"}.promise()
	if p.Holders != semaphorePermits || !keeps(p, c) {
		t.Errorf("promise %+v not kept by %+v", p, c)
	}
	if plain := (Cell{Strategy: "single", Nemesis: "none"}).promise(); keeps(plain, c) {
		t.Errorf("two holders at once kept the plain lock's promise %+v", plain)
	}
	// A third holder while both permits are held, on permit a again with a
	// smaller fence.
	three := append(two[:len(two):len(two)],
		ev(2, 4, Acquire, 1, 0, 0, ""), ev(3, 4, Granted, 1, 2, 100, "a"), ev(4, 4, Release, 1, 0, 0, ""))
	sortEvents(three)
	if c := Check(three); c.MostHolders != 3 || c.Overlaps != 1 || c.FenceRegressions != 1 || keeps(p, c) {
		t.Errorf("three holders of two permits: %+v, want 3 at most, 1 overlap, 1 fence regression, broken", c)
	}
}

// Nemeses joined by '+' strike together: the holder's part first, for the
// longest hold, where every part applies, promising what every part keeps.
func TestCombinedNemesis(t *testing.T) {
	n := findNemesis("stop-minority+pause-holder")
	if n == nil {
		t.Fatal("stop-minority+pause-holder unknown")
	}
	if !n.onHolder || !strings.HasPrefix(n.Doc, "at once: SIGSTOP the client") {
		t.Errorf("the holder's part is not first: onHolder %v, %q", n.onHolder, n.Doc)
	}
	if got := n.hold(time.Second); got != 2500*time.Millisecond {
		t.Errorf("hold %v, want the longest part's, 2.5s", got)
	}
	if n.applies("single") || !n.applies("redlock") {
		t.Error("applies where a part does not, or not where all do")
	}
	if c := findNemesis("kill-fsync+partition-holder"); c == nil || !c.persist {
		t.Error("a part's persistence is lost")
	}
	for _, bad := range []string{"none+pause-holder", "pause-holder+pause-holder", "pause-holder+nope"} {
		if findNemesis(bad) != nil {
			t.Errorf("%s accepted", bad)
		}
	}
	if p := promise("failover-ack-none", "failover+pause-holder"); p.Exclusion || p.Fences || p.Why == "" {
		t.Errorf("a part's documented limit is lost: %+v", p)
	}
	if p := promise("redlock", "stop-minority+pause-holder"); !p.Exclusion || !p.Fences {
		t.Errorf("promise %+v, want all kept", p)
	}
}

// A hold of several locks (a writer's, a multi-key lock's) is one grant of
// the attempt, one lease per key: Release ends them all, Ended its own key's
// only, and two holds overlap where they share a key.
func TestCheckHoldsOfSeveralKeys(t *testing.T) {
	ev := func(tm int64, c int, k Kind, f uint64, until int64, key string) Event {
		return Event{T: tm, Client: c, Kind: k, Op: 1, Fence: f, Until: until, N: 1, Key: key}
	}
	hold := func(c int, at, release int64, keys ...string) []Event {
		out := []Event{ev(at-1, c, Acquire, 0, 0, "")}
		for i, k := range keys {
			out = append(out, ev(at, c, Granted, uint64(at)*10+uint64(i), at+1000, k))
		}
		return append(out, ev(release, c, Release, 0, 0, ""))
	}
	// {a,b} released at 10, then {b,c}: one at a time.
	apart := append(hold(1, 1, 10, "a", "b"), hold(2, 11, 20, "b", "c")...)
	sortEvents(apart)
	if c := Check(apart); c.Grants != 2 || c.SeveralKeys != 2 || c.Overlaps != 0 || c.MostHolders != 1 || c.FenceRegressions != 0 {
		t.Errorf("holds one after the other: %+v, want 2 grants of several keys, no overlap, 1 holder at most", c)
	}
	// {b,c} granted while {a,b} is held: they share b.
	shared := append(hold(1, 1, 10, "a", "b"), hold(2, 5, 20, "b", "c")...)
	sortEvents(shared)
	if c := Check(shared); c.Overlaps != 1 || c.MostHolders != 2 {
		t.Errorf("holds sharing b: %+v, want 1 overlap, 2 holders at once", c)
	}
	// b's lease of client 1 ended at 4 (its Context), before client 2 took
	// b: no overlap, though client 1 still held a until 10; and the hold
	// was valid only until b ended.
	ended := append(hold(1, 1, 10, "a", "b"), ev(4, 1, Ended, 0, 0, "b"))
	ended = append(ended, hold(2, 5, 20, "b", "c")...)
	sortEvents(ended)
	if c := Check(ended); c.Overlaps != 0 || c.MostHolders != 1 {
		t.Errorf("b ended before it was taken again: %+v, want no overlap, 1 holder at most", c)
	}
}

// The results table says how many grants came by hand-off, and, for the
// lock family, how many holders were seen at once against how many the
// primitive allows; results.json reads back as written.
func TestResultsTable(t *testing.T) {
	dir := t.TempDir()
	plain := Cell{Strategy: "single", Nemesis: "pause-holder", Workers: 2}
	sem := Cell{Strategy: "redlock", Nemesis: "none", Primitive: "semaphore"}
	results := []Result{
		{Cell: plain, Promise: plain.promise(), Kept: true, Faults: 3, Counts: Counts{Attempts: 120, Grants: 100, Handoffs: 40}},
		{Cell: sem, Promise: sem.promise(), Kept: true, Counts: Counts{Attempts: 50, Grants: 50, MostHolders: 2}},
	}
	if err := WriteResults(dir, results, "header"); err != nil {
		t.Fatal(err)
	}
	md, err := os.ReadFile(filepath.Join(dir, "results.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"| single | pause-holder | 100 / 120 (40 handed over) | 3 | 0 |",
		"| redlock/semaphore | none | 50 / 50 | 0 | 0 (holders at once: 2, allowed 2) |",
	} {
		if !strings.Contains(string(md), want) {
			t.Errorf("results.md lacks %q:\n%s", want, md)
		}
	}
	b, err := os.ReadFile(filepath.Join(dir, "results.json"))
	if err != nil {
		t.Fatal(err)
	}
	var back []Result
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	if len(back) != 2 || back[0].Counts.Handoffs != 40 || back[1].Cell.Primitive != "semaphore" {
		t.Errorf("results.json read back as %+v", back)
	}
}

// Late writes sent on purpose (Cell.LateWrites): the checker counts the
// writes and what the store did with them; a late write accepted while no
// larger fence was granted keeps the promise, one accepted after a larger
// fence was granted breaks it.
func TestCheckLateWrites(t *testing.T) {
	ev := func(tm int64, c int, k Kind, op, n int, f uint64, until int64) Event {
		return Event{T: tm, Client: c, Kind: k, Op: op, N: n, Fence: f, Until: until}
	}
	// Client 1's lease ends at 10; it writes late at 20 (accepted: no one
	// else holds) and at 60 (refused: client 2, granted at 40, wrote with
	// fence 6 first). Client 2's write at 45 is given up before the store
	// wrote it.
	history := func(lateAccepted Kind) []Event {
		h := []Event{
			ev(0, 1, Acquire, 1, 0, 0, 0), ev(1, 1, Granted, 1, 0, 5, 10), ev(2, 1, Write, 1, 1, 5, 0), ev(3, 1, RegAccept, 1, 1, 5, 0),
			ev(20, 1, Write, 1, 2, 5, 0), ev(21, 1, RegAccept, 1, 2, 5, 0),
			ev(30, 2, Acquire, 1, 0, 0, 0), ev(40, 2, Granted, 1, 0, 6, 100), ev(41, 2, Write, 1, 1, 6, 0), ev(42, 2, RegAccept, 1, 1, 6, 0),
			ev(45, 2, Write, 1, 2, 6, 0), ev(46, 2, RegCancel, 1, 2, 6, 0),
			ev(60, 1, Write, 1, 3, 5, 0), ev(61, 1, lateAccepted, 1, 3, 5, 0),
			ev(90, 2, Release, 1, 0, 0, 0),
		}
		sortEvents(h)
		return h
	}
	p := Promise{Exclusion: true, Fences: true, Holders: 1, LateWrites: true}
	c := Check(history(RegRefuse))
	want := Counts{Writes: 5, StoreAccepted: 3, SavedWrites: 1, StoreCancelled: 1, LateWrites: 2, LateAccepted: 1, LateRefused: 1}
	if c.Writes != want.Writes || c.StoreAccepted != want.StoreAccepted || c.SavedWrites != want.SavedWrites || c.StoreCancelled != want.StoreCancelled ||
		c.LateWrites != want.LateWrites || c.LateAccepted != want.LateAccepted || c.LateRefused != want.LateRefused || c.LostWrites != 0 {
		t.Errorf("late writes: %+v, want %+v", c, want)
	}
	if !keeps(p, c) {
		t.Errorf("a late write accepted while no larger fence was granted broke the promise: %+v", c)
	}
	if p.LateWrites = false; keeps(p, c) {
		t.Errorf("without late writes on purpose, a late write accepted kept exclusion: %+v", c)
	}
	p.LateWrites = true
	// The store accepts the late write after client 2's larger fence: lost.
	if c := Check(history(RegAccept)); c.LostWrites != 1 || keeps(p, c) {
		t.Errorf("a late write accepted after a larger fence was granted: %+v, want 1 lost write and a broken promise", c)
	}
}
