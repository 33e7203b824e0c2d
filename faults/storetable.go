package faults

import (
	"fmt"
	"strings"
)

// writeStoreTable writes results as the Markdown table of the cells whose
// register is a real store or whose clients write late (Cell.Register,
// Cell.LateWrites): the writes and what the store did with them.
func writeStoreTable(md *strings.Builder, results []Result) {
	md.WriteString("| locks @ register | nemesis | granted / attempts | faults | overlaps | fence regressions | writes sent | accepted | refused | given up | store errors | late writes sent | late refused | late accepted | accepted after a larger fence was granted | register | promise | verdict |\n")
	md.WriteString("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |\n")
	for _, r := range results {
		c := r.Counts
		p, verdict := promiseAndVerdict(r)
		taken := r.Cell.Taken()
		if r.Cell.Register == "" {
			taken += "@memory"
		}
		if r.Cell.Plant != "" {
			taken += " (planted: " + r.Cell.Plant + ")"
		}
		fmt.Fprintf(md, "| %s | %s | %d / %d | %d | %d | %d | %d | %d | %d | %d | %d | %d | %d | %d | %d | %s | %s | %s |\n",
			taken, r.Cell.Nemesis, c.Grants, c.Attempts, r.Faults, c.Overlaps, c.FenceRegressions,
			c.Writes, c.StoreAccepted, c.SavedWrites, c.StoreCancelled, c.StoreErrors, c.LateWrites, c.LateRefused, c.LateAccepted, c.LostWrites,
			c.Linearizable, p, verdict)
	}
}
