package main

import (
	"fmt"
	"html"
	"io"
	"strings"
)

// WriteSVG draws one horizontal bar panel per scenario, for the scenario's
// headline figure: dlm's bars in blue, peers' in grey, single-instance and
// five-node contenders apart (ratios compare within a group).
func (r *Report) WriteSVG(w io.Writer) error {
	const (
		width  = 960
		labelW = 250
		valueW = 110
		barH   = 16
		rowH   = 22
		headH  = 34
		gap    = 18
		left   = 10
	)
	barW := width - labelW - valueW - 2*left
	type panel struct {
		title string
		rows  []Row
		key   string
	}
	var panels []panel
	for _, s := range r.Scenarios {
		for _, m := range s.Metrics {
			if !m.Chart {
				continue
			}
			dir := "lower is better"
			if m.Higher {
				dir = "higher is better"
			}
			unit := m.Label
			if m.Unit != "" {
				unit += ", " + m.Unit
			}
			panels = append(panels, panel{title: fmt.Sprintf("%s — %s (%s)", s.Title, unit, dir), rows: s.Rows, key: m.Key})
		}
	}
	const groupGap = 10 // between the 1-node and the 5-node contenders
	height := 60
	for _, p := range panels {
		height += headH + len(p.rows)*rowH + gap
		for i := 1; i < len(p.rows); i++ {
			if p.rows[i].Nodes != p.rows[i-1].Nodes {
				height += groupGap
			}
		}
	}
	noteLines := wrap(r.Note, 130)
	height += 18 * len(noteLines)
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="sans-serif" font-size="12">`+"\n", width, height, width, height)
	fmt.Fprintf(&b, `<rect width="100%%" height="100%%" fill="white"/>`+"\n")
	sub := fmt.Sprintf("%s · %s, %d cores · %s · Redis %s · median of %d · load %s", r.Machine.Date, r.Machine.CPU, r.Machine.Cores, r.Machine.Go, r.Machine.RedisVersion, r.Config.Reps, r.Machine.LoadStart)
	fmt.Fprintf(&b, `<text x="%d" y="22" font-size="16" font-weight="bold">dlm against other Go lock libraries</text>`+"\n", left)
	fmt.Fprintf(&b, `<text x="%d" y="42" fill="#555">%s</text>`+"\n", left, html.EscapeString(sub))
	fmt.Fprintf(&b, `<rect x="%d" y="10" width="12" height="12" fill="#1a73e8"/><text x="%d" y="21">dlm</text>`+"\n", width-150, width-134)
	fmt.Fprintf(&b, `<rect x="%d" y="10" width="12" height="12" fill="#9aa0a6"/><text x="%d" y="21">peers</text>`+"\n", width-95, width-79)
	y := 60
	for _, l := range noteLines {
		fmt.Fprintf(&b, `<text x="%d" y="%d" fill="#b3261e">%s</text>`+"\n", left, y, html.EscapeString(l))
		y += 18
	}
	for _, p := range panels {
		fmt.Fprintf(&b, `<text x="%d" y="%d" font-weight="bold">%s</text>`+"\n", left, y+20, html.EscapeString(p.title))
		y += headH
		var maxV float64
		for _, row := range p.rows {
			maxV = max(maxV, row.Median[p.key])
		}
		for i, row := range p.rows {
			if i > 0 && row.Nodes != p.rows[i-1].Nodes {
				fmt.Fprintf(&b, `<line x1="%d" x2="%d" y1="%d" y2="%d" stroke="#ccc" stroke-dasharray="4 3"/>`+"\n", left, width-left, y+groupGap/2-3, y+groupGap/2-3)
				y += groupGap
			}
			v, ok := row.Median[p.key]
			name := row.Contender
			if row.Nodes > 1 {
				name += fmt.Sprintf(" (%d nodes)", row.Nodes)
			}
			fmt.Fprintf(&b, `<text x="%d" y="%d" text-anchor="end">%s</text>`+"\n", left+labelW-8, y+barH-3, html.EscapeString(name))
			if !ok {
				fmt.Fprintf(&b, `<text x="%d" y="%d" fill="#a00">error</text>`+"\n", left+labelW, y+barH-3)
				y += rowH
				continue
			}
			wBar := 0.0
			if maxV > 0 {
				wBar = v / maxV * float64(barW)
			}
			color := "#9aa0a6"
			if row.Lib == "dlm" {
				color = "#1a73e8"
			}
			fmt.Fprintf(&b, `<rect x="%d" y="%d" width="%.1f" height="%d" fill="%s"/>`+"\n", left+labelW, y, max(wBar, 1), barH, color)
			label := num(v)
			if q, ok := row.Ratio[p.key]; ok {
				label += fmt.Sprintf(" (%.2f×)", q)
			}
			fmt.Fprintf(&b, `<text x="%.1f" y="%d">%s</text>`+"\n", float64(left+labelW)+max(wBar, 1)+6, y+barH-3, html.EscapeString(label))
			y += rowH
		}
		y += gap
	}
	b.WriteString("</svg>\n")
	_, err := io.WriteString(w, b.String())
	return err
}

// wrap splits s into lines of at most n bytes at spaces.
func wrap(s string, n int) []string {
	var lines []string
	var cur string
	for _, w := range strings.Fields(s) {
		if cur != "" && len(cur)+1+len(w) > n {
			lines = append(lines, cur)
			cur = ""
		}
		if cur != "" {
			cur += " "
		}
		cur += w
	}
	if cur != "" {
		lines = append(lines, cur)
	}
	return lines
}
