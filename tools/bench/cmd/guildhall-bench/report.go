package main

import (
	"fmt"
	"math"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"
)

// runRecord is one load run, as written to results.jsonl.
type runRecord struct {
	Scenario   string `json:"scenario"`
	Variant    string `json:"variant,omitempty"` // a scenario with writes: alone or with_writes; one measured next to another: "beside <other>"
	Target     string `json:"target"`
	Phase      string `json:"phase"` // warmup or measure
	Round      int    `json:"round"`
	Seconds    num    `json:"seconds"`            // of load
	Window     num    `json:"cpu_window_seconds"` // between the CPU samples
	Requests   int64  `json:"requests"`
	OK         int64  `json:"ok"`
	Non2xx     int64  `json:"non_2xx"`
	SockErrs   int64  `json:"socket_errors"`
	RPS        num    `json:"rps_2xx"`
	SrvTicks   uint64 `json:"server_cpu_ticks"`
	SrvUs      num    `json:"server_us_per_request"`
	SrvCores   num    `json:"server_cores"`
	GenCores   num    `json:"loadgen_cores"`
	OtherCores num    `json:"other_cores"`
	P50ms      num    `json:"p50_ms"`
	P99ms      num    `json:"p99_ms"`
	MaxMs      num    `json:"max_ms"`
	FirstBad   string `json:"first_bad,omitempty"`
	// The writes beside the requests (variant with_writes).
	Writes     int64 `json:"writes,omitempty"`
	WritesOK   int64 `json:"writes_ok,omitempty"`
	WritesBad  int64 `json:"writes_bad,omitempty"` // non-2xx and socket errors
	WriteP99ms num   `json:"write_p99_ms,omitempty"`
}

// num is a float64 that is null in JSON when it is not a number.
type num float64

func (n num) MarshalJSON() ([]byte, error) {
	f := float64(n)
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return []byte("null"), nil
	}
	return strconv.AppendFloat(nil, f, 'g', 6, 64), nil
}

// targetResult is everything one target did in one scenario.
type targetResult struct {
	rounds []runRecord // measured rounds, by round index
	lat    []int64     // the latencies of every measured request, ns
	wlat   []int64     // and of every write beside them, ns
}

func (r *targetResult) series(f func(runRecord) float64) []float64 {
	out := make([]float64, len(r.rounds))
	for i, rec := range r.rounds {
		out[i] = f(rec)
	}
	return out
}

func usOf(r runRecord) float64  { return float64(r.SrvUs) }
func rpsOf(r runRecord) float64 { return float64(r.RPS) }

func fmtNum(x float64) string {
	switch {
	case math.IsNaN(x):
		return "–"
	case x >= 1000:
		return thousands(int64(math.Round(x)))
	case x >= 100:
		return strconv.FormatFloat(x, 'f', 0, 64)
	case x >= 10:
		return strconv.FormatFloat(x, 'f', 1, 64)
	default:
		return strconv.FormatFloat(x, 'f', 2, 64)
	}
}

func thousands(n int64) string {
	s := strconv.FormatInt(n, 10)
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	if neg {
		return "-" + b.String()
	}
	return b.String()
}

// fmtSpread prints "median (min–max)", or just the value for one round.
func fmtSpread(s spread, unit string) string {
	if s.n == 0 {
		return "–"
	}
	if s.n == 1 || s.lo == s.hi {
		return fmtNum(s.med) + unit
	}
	return fmt.Sprintf("%s%s (%s–%s)", fmtNum(s.med), unit, fmtNum(s.lo), fmtNum(s.hi))
}

func ms(ns int64) float64 { return float64(ns) / 1e6 }

// scenarioTable renders one scenario's table: a row per target, the ratio
// column taken round by round against the row's reference (refOf; the
// ceiling, or the smaller instance of a pair), which the header names.
func scenarioTable(sc scenario, how string, targets []string, res map[string]*targetResult, refOf map[string]string, refLabel string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "### %s\n\n`%s %s`", sc.name, sc.method, sc.path)
	if sc.body != "" {
		fmt.Fprintf(&b, " `%s`", sc.body)
	}
	fmt.Fprintf(&b, " (%s)\n\n", how)
	head := "| target | req/s median (min–max) | server CPU µs/req | p50 ms | p99 ms |"
	sep := "|---|--:|--:|--:|--:|"
	if sc.open {
		head += " max ms |"
		sep += "--:|"
	}
	head += " errors | µs/req × " + refLabel + " |"
	sep += "--:|--:|"
	b.WriteString(head + "\n" + sep + "\n")
	var notes []string
	for _, name := range targets {
		r := res[name]
		if r == nil || len(r.rounds) == 0 {
			continue
		}
		slices.Sort(r.lat)
		var reqs, bad int64
		genMax := 0.0
		for _, rec := range r.rounds {
			reqs += rec.Requests
			bad += rec.Non2xx + rec.SockErrs
			genMax = max(genMax, float64(rec.GenCores))
			if rec.FirstBad != "" && !slices.Contains(notes, name+": "+rec.FirstBad) && len(notes) < 6 {
				notes = append(notes, name+": "+rec.FirstBad)
			}
		}
		if !sc.open && genMax > 0.9 {
			notes = append(notes, fmt.Sprintf("%s: the load generator used %.2f of its core in a round; this row's req/s may be the generator's limit, not the server's", name, genMax))
		}
		ratio := "–"
		if ref := res[refOf[name]]; name == refOf[name] {
			ratio = "1×"
		} else if ref != nil {
			ratio = fmtSpread(summarize(pairRatios(r.series(usOf), ref.series(usOf))), "×")
		}
		row := fmt.Sprintf("| %s | %s | %s | %s | %s |", name, fmtSpread(summarize(r.series(rpsOf)), ""),
			fmtSpread(summarize(r.series(usOf)), ""), fmtNum(ms(percentile(r.lat, 50))), fmtNum(ms(percentile(r.lat, 99))))
		if sc.open {
			row += " " + fmtNum(ms(percentile(r.lat, 100))) + " |"
		}
		row += fmt.Sprintf(" %s/%s | %s |", thousands(bad), thousands(reqs), ratio)
		b.WriteString(row + "\n")
	}
	for _, n := range notes {
		b.WriteString("\n- " + n)
	}
	if len(notes) > 0 {
		b.WriteString("\n")
	}
	return b.String()
}

// ratioSummary renders the heavy/light and deep/shallow ratios that the
// scenarios measured: each target's µs/req of one scenario over another,
// round by round.
func ratioSummary(targets []string, all map[string]map[string]*targetResult) string {
	pair := func(target, a, b string) string {
		ra, rb := all[a][target], all[b][target]
		if ra == nil || rb == nil {
			return "–"
		}
		return fmtSpread(summarize(pairRatios(ra.series(usOf), rb.series(usOf))), "×")
	}
	perItem := func(target, sc string, items float64) string {
		r := all[sc][target]
		if r == nil {
			return "–"
		}
		s := summarize(r.series(usOf))
		return fmtNum(s.med / items)
	}
	var b strings.Builder
	if all["perms_heavy"] != nil || all["list_overwrites_heavy"] != nil {
		b.WriteString("### heavy / light\n\n")
		b.WriteString(fmt.Sprintf("Server CPU per request of a user holding %d roles in a channel with %d overwrites, over a user with no roles in a bare channel (round by round).\n\n", heavyRoles, 1+heavyRoles+heavyUserOvers))
		b.WriteString("| target | permissions | with explain | list overwrites | µs per overwrite listed | µs per user listed (list_users) |\n|---|--:|--:|--:|--:|--:|\n")
		for _, t := range targets {
			fmt.Fprintf(&b, "| %s | %s | %s | %s | %s | %s |\n", t,
				pair(t, "perms_heavy", "perms_light"), pair(t, "perms_heavy_explain", "perms_light_explain"),
				pair(t, "list_overwrites_heavy", "list_overwrites_light"),
				perItem(t, "list_overwrites_heavy", float64(1+heavyRoles+heavyUserOvers)), perItem(t, "list_users", 50))
		}
		b.WriteString("\n")
	}
	if all["page_1000"] != nil {
		b.WriteString("### page 1,000 / page 1\n\n| target | µs/req page 1,000 ÷ page 1 |\n|---|--:|\n")
		for _, t := range targets {
			fmt.Fprintf(&b, "| %s | %s |\n", t, pair(t, "page_1000", "page_1"))
		}
		b.WriteString("\n")
	}
	return b.String()
}

// mixedGoal is the most that writes beside the reads may add to the
// server's CPU per read (the writes' own CPU included): a write
// invalidates what it changed, not every cached read.
const mixedGoal = 1.15

// mixedTable renders a scenario with writes: per target, the reads alone
// and with the writes, and the ratio of server CPU per read, round by
// round.
func mixedTable(sc scenario, how string, rate float64, targets []string, alone, with map[string]*targetResult) string {
	var b strings.Builder
	fmt.Fprintf(&b, "### %s\n\n`%s %s` (%s), alone and with `%s %s` `%s` beside it at %g req/s (open loop, one connection), "+
		"each target alone and then with them in every round. Server CPU per read counts all of the server's CPU, the writes' too.\n\n",
		sc.name, sc.method, sc.path, how, sc.writes.method, sc.writes.path, sc.writes.body, rate)
	b.WriteString("| target | reads/s alone | reads/s with writes | µs/read alone | µs/read with writes | with ÷ alone | read p99 ms alone, with | writes/s | write p99 ms | errors |\n")
	b.WriteString("|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|\n")
	var goal, notes []string
	for _, name := range targets {
		a, w := alone[name], with[name]
		if a == nil || w == nil || len(w.rounds) == 0 {
			continue
		}
		slices.Sort(a.lat)
		slices.Sort(w.lat)
		slices.Sort(w.wlat)
		var reqs, bad, writes, wbad int64
		var secs float64
		for _, rec := range append(slices.Clone(a.rounds), w.rounds...) {
			reqs += rec.Requests + rec.Writes
			bad += rec.Non2xx + rec.SockErrs + rec.WritesBad
			if rec.FirstBad != "" && len(notes) < 6 && !slices.Contains(notes, name+": "+rec.FirstBad) {
				notes = append(notes, name+": "+rec.FirstBad)
			}
		}
		for _, rec := range w.rounds {
			writes += rec.WritesOK
			wbad += rec.WritesBad
			secs += float64(rec.Seconds)
		}
		ratio := summarize(pairRatios(w.series(usOf), a.series(usOf)))
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %s | %s | %s, %s | %s | %s | %s/%s |\n", name,
			fmtSpread(summarize(a.series(rpsOf)), ""), fmtSpread(summarize(w.series(rpsOf)), ""),
			fmtSpread(summarize(a.series(usOf)), ""), fmtSpread(summarize(w.series(usOf)), ""),
			fmtSpread(ratio, "×"), fmtNum(ms(percentile(a.lat, 99))), fmtNum(ms(percentile(w.lat, 99))),
			fmtNum(float64(writes)/secs), fmtNum(ms(percentile(w.wlat, 99))), thousands(bad), thousands(reqs))
		if name != "ceiling" && ratio.n > 0 {
			verdict := "met"
			// Judged on the figure shown (two decimals), so that 1.25× is met.
			if math.Round(ratio.med*100)/100 > mixedGoal {
				verdict = "not met"
			}
			goal = append(goal, fmt.Sprintf("%s %s (%s)", name, fmtNum(ratio.med)+"×", verdict))
		}
	}
	if len(goal) > 0 {
		fmt.Fprintf(&b, "\nGoal: with ÷ alone ≤ %g×, median of the rounds: %s. The ceiling's row shows what the method itself adds (its writes store nothing).\n",
			mixedGoal, strings.Join(goal, ", "))
	}
	for _, n := range notes {
		b.WriteString("\n- " + n)
	}
	if len(notes) > 0 {
		b.WriteString("\n")
	}
	return b.String()
}

// millionSummary renders, for each pair of million instances, the server
// CPU per request of the bigger over the smaller, round by round, per
// scenario.
func millionSummary(targets []*target, all map[string]map[string]*targetResult) string {
	var pairs []*target
	for _, t := range targets {
		if t.ref != nil {
			pairs = append(pairs, t)
		}
	}
	var rows []string
	for _, sc := range scenarios {
		if sc.needs == "million" && all[sc.name] != nil {
			rows = append(rows, sc.name)
		}
	}
	if len(pairs) == 0 || len(rows) == 0 {
		return ""
	}
	var b strings.Builder
	fmt.Fprintf(&b, "### %s users / %s users\n\n", thousands(int64(pairs[0].users)), thousands(int64(pairs[0].ref.users)))
	b.WriteString("Server CPU per request of the bigger instance over the smaller one's, round by round, median (min–max).")
	if small := pairs[0].ref; small.deepPage > 0 && small.deepPage < pairs[0].deepPage {
		fmt.Fprintf(&b, " million_page_1000 fetches page %d of the bigger, and page %d of the smaller (its last full page).", pairs[0].deepPage, small.deepPage)
	}
	b.WriteString("\n\n| scenario |")
	sep := "|---|"
	for _, t := range pairs {
		fmt.Fprintf(&b, " %s ÷ %s |", t.name, t.ref.name)
		sep += "--:|"
	}
	b.WriteString("\n" + sep + "\n")
	for _, sc := range rows {
		fmt.Fprintf(&b, "| %s |", sc)
		for _, t := range pairs {
			big, small := all[sc][t.name], all[sc][t.ref.name]
			cell := "–"
			if big != nil && small != nil {
				cell = fmtSpread(summarize(pairRatios(big.series(usOf), small.series(usOf))), "×")
			}
			b.WriteString(" " + cell + " |")
		}
		b.WriteString("\n")
	}
	b.WriteString(besideTable(targets, all))
	b.WriteString("\nSeeded in bulk:")
	for i, t := range targets {
		sep := ","
		if i == 0 {
			sep = ""
		}
		fmt.Fprintf(&b, "%s %s %s users in %v", sep, t.name, thousands(int64(t.users)), t.seedTime.Round(10*time.Millisecond))
	}
	b.WriteString(".\n\n")
	b.WriteString(memoryTable(targets))
	return b.String()
}

// besideTable renders, for each million scenario measured beside another,
// its server CPU per request over the other's on the same instance, round
// by round.
func besideTable(targets []*target, all map[string]map[string]*targetResult) string {
	var b strings.Builder
	for _, sc := range scenarios {
		res, beside := all[sc.name], all[sc.name+besideSuffix]
		if sc.needs != "million" || res == nil || beside == nil {
			continue
		}
		fmt.Fprintf(&b, "\n%s over %s on the same instance, measured next to it in every round (before it in the first round, after it in the second, and so on): server CPU per request, median (min–max).\n\n", sc.name, sc.beside)
		fmt.Fprintf(&b, "| instance | %s µs | %s µs | ratio |\n|---|--:|--:|--:|\n", sc.name, sc.beside)
		for _, t := range targets {
			r, o := res[t.name], beside[t.name]
			if r == nil || o == nil {
				continue
			}
			fmt.Fprintf(&b, "| %s | %s | %s | %s |\n", t.name,
				fmtSpread(summarize(r.series(usOf)), ""), fmtSpread(summarize(o.series(usOf)), ""),
				fmtSpread(summarize(pairRatios(r.series(usOf), o.series(usOf))), "×"))
		}
	}
	return b.String()
}

// memoryTable renders each million instance's resident set after each
// scenario, and its peak since it started (the server process alone:
// PostgreSQL's processes are not counted).
func memoryTable(targets []*target) string {
	var cols []string
	for _, t := range targets {
		for _, m := range t.memory {
			if !slices.Contains(cols, m.scenario) {
				cols = append(cols, m.scenario)
			}
		}
	}
	if len(cols) == 0 {
		return ""
	}
	var b strings.Builder
	b.WriteString("Server RSS in MB after each scenario, and its peak since it started (VmHWM):\n\n| instance |")
	for _, c := range cols {
		b.WriteString(" " + c + " |")
	}
	b.WriteString(" peak |\n|---|" + strings.Repeat("--:|", len(cols)+1) + "\n")
	for _, t := range targets {
		fmt.Fprintf(&b, "| %s |", t.name)
		var peak int64
		for _, c := range cols {
			cell := "–"
			for _, m := range t.memory {
				if m.scenario == c {
					cell = fmt.Sprintf("%.1f", float64(m.rss)/1e6)
					peak = max(peak, m.hwm)
				}
			}
			b.WriteString(" " + cell + " |")
		}
		fmt.Fprintf(&b, " %.1f |\n", float64(peak)/1e6)
	}
	b.WriteString("\n")
	return b.String()
}

// machine describes where and what was measured.
func machine(guildhallBin string, pg *pgCluster) []string {
	model := "unknown"
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
				model = strings.TrimSpace(v)
				break
			}
		}
	}
	kernel := "unknown"
	if b, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		kernel = strings.TrimSpace(string(b))
	}
	lines := []string{
		fmt.Sprintf("CPU: %s, %d cores online; kernel %s; %s/%s", model, onlineCPUs(), kernel, runtime.GOOS, runtime.GOARCH),
		"Go: " + runtime.Version(),
	}
	if out, err := exec.Command(guildhallBin, "version").Output(); err == nil {
		lines = append(lines, "guildhall version: "+strings.TrimSpace(string(out)))
	}
	if out, err := exec.Command("git", "rev-parse", "HEAD").Output(); err == nil {
		commit := strings.TrimSpace(string(out))
		if st, err := exec.Command("git", "status", "--porcelain", "--untracked-files=no").Output(); err == nil && len(strings.TrimSpace(string(st))) > 0 {
			commit += " (with uncommitted changes)"
		}
		lines = append(lines, "git commit: "+commit)
	}
	if pg != nil && pg.version != "" {
		v := pg.version
		if i := strings.Index(v, " on "); i > 0 {
			v = v[:i]
		}
		lines = append(lines, "PostgreSQL: "+v)
	}
	return lines
}
