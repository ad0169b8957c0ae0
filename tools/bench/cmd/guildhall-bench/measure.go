package main

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	mrand "math/rand/v2"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/guildhall/guildhall/tools/bench/internal/client"
)

// source builds the requests of sc for t and sends one as a preflight; nil
// when t has not what sc needs.
func (b *bench) source(sc scenario, t *target) (*client.Source, error) {
	path, body, keys, err := sc.fill(t)
	if err != nil {
		progress("  %s: skipped: %v\n", t.name, err)
		return nil, nil
	}
	tpl, err := client.NewTemplate(sc.method, path, body, t.addr, t.token)
	if err != nil {
		return nil, err
	}
	// A million keys would hold a million requests: those are built as
	// they are sent, on every target of the group alike.
	src, err := client.NewSource(tpl, keys, b.tag, &b.counter, sc.needs != "million")
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w", sc.name, t.name, err)
	}
	if sc.skew > 0 {
		src.Skewed(sc.skew)
	}
	status, snippet, err := preflight(t.addr, src)
	switch {
	case err != nil:
		return nil, fmt.Errorf("%s %s: preflight: %w", sc.name, t.name, err)
	case status < 200 || status > 299:
		progress("  %s: preflight answered %d: %s\n", t.name, status, snippet)
	}
	return src, nil
}

// aloneSuffix names the results of a scenario with writes measured without
// them.
const aloneSuffix = "/alone"

// besideSuffix names the results of the scenario measured beside another
// (scenario.beside), under the other's name.
const besideSuffix = "/beside"

// scenarioRun is one scenario measured on a group of targets: the
// requests of each target, those of the writes beside them and of the
// scenario measured beside it (base), and where each one's results go.
type scenarioRun struct {
	sc, base               scenario
	group                  []*target
	srcs, writes, baseSrcs map[*target]*client.Source
	res, alone, beside     map[string]*targetResult
}

func (b *bench) runScenario(ctx context.Context, sc scenario) error {
	progress("== %s\n", sc.name)
	r, err := b.newScenarioRun(sc)
	if err != nil {
		return err
	}
	if err := b.warmUp(ctx, r); err != nil {
		return err
	}
	for round := 0; round < b.cfg.rounds; round++ {
		order := slices.Clone(r.group)
		if round%2 == 1 {
			slices.Reverse(order)
		}
		for _, t := range order {
			if r.srcs[t] == nil {
				continue
			}
			if err := b.measureRound(ctx, r, t, round); err != nil {
				return err
			}
		}
	}
	b.reportScenario(r)
	return nil
}

// newScenarioRun builds sc's requests for each target of its group that
// has what sc needs (with a preflight each), and registers where the
// results go.
func (b *bench) newScenarioRun(sc scenario) (*scenarioRun, error) {
	group := b.group("")
	if sc.needs == "million" || sc.needs == "history" {
		group = b.group(sc.needs)
	}
	r := &scenarioRun{sc: sc, group: group,
		srcs: map[*target]*client.Source{}, writes: map[*target]*client.Source{}, baseSrcs: map[*target]*client.Source{},
		res: map[string]*targetResult{}, alone: map[string]*targetResult{}, beside: map[string]*targetResult{}}
	for _, t := range group {
		src, err := b.source(sc, t)
		if err != nil || src == nil {
			if err != nil {
				return nil, err
			}
			continue
		}
		r.srcs[t] = src
		if sc.writes != nil {
			if r.writes[t], err = b.source(*sc.writes, t); err != nil {
				return nil, err
			}
		}
	}
	b.results[sc.name] = r.res
	if sc.writes != nil {
		b.results[sc.name+aloneSuffix] = r.alone
	}
	if sc.beside != "" {
		var ok bool
		if r.base, ok = scenarioNamed(sc.beside); !ok {
			return nil, fmt.Errorf("%s: no scenario %q to measure beside it", sc.name, sc.beside)
		}
		r.base.variant = "beside " + sc.name
		for t := range r.srcs {
			src, err := b.source(r.base, t)
			if err != nil {
				return nil, err
			}
			r.baseSrcs[t] = src
		}
		b.results[sc.name+besideSuffix] = r.beside
	}
	return r, nil
}

// warmUp warms each target up once before the rounds. With writes, every
// round warms each target up again before its reads alone (the writes of
// its last round emptied its read cache), so no warm-up happens here.
func (b *bench) warmUp(ctx context.Context, r *scenarioRun) error {
	if b.cfg.warmup <= 0 || r.sc.writes != nil {
		return nil
	}
	for _, t := range r.group {
		if r.srcs[t] != nil {
			if _, _, _, err := b.measure(ctx, r.sc, t, r.srcs[t], nil, "warmup", 0); err != nil {
				return err
			}
		}
		if r.baseSrcs[t] != nil {
			if _, _, _, err := b.measure(ctx, r.base, t, r.baseSrcs[t], nil, "warmup", 0); err != nil {
				return err
			}
		}
	}
	return nil
}

// measureRound measures sc on t for one round: first its reads alone when
// it has writes, then with them; the scenario measured beside it runs
// before on even rounds and after on odd ones, so neither always goes
// first.
func (b *bench) measureRound(ctx context.Context, r *scenarioRun, t *target, round int) error {
	if r.sc.writes != nil {
		if b.cfg.warmup > 0 {
			if _, _, _, err := b.measure(ctx, r.sc, t, r.srcs[t], nil, "warmup", round); err != nil {
				return err
			}
		}
		rec, lat, _, err := b.measure(ctx, r.sc, t, r.srcs[t], nil, "measure", round)
		if err != nil {
			return err
		}
		addRound(r.alone, t, rec, lat, nil)
	}
	if round%2 == 0 {
		if err := b.measureBeside(ctx, r, t, round); err != nil {
			return err
		}
	}
	rec, lat, wlat, err := b.measure(ctx, r.sc, t, r.srcs[t], r.writes[t], "measure", round)
	if err != nil {
		return err
	}
	addRound(r.res, t, rec, lat, wlat)
	if round%2 == 1 {
		if err := b.measureBeside(ctx, r, t, round); err != nil {
			return err
		}
	}
	return nil
}

// measureBeside measures, on t, the scenario r's is measured beside, if
// any.
func (b *bench) measureBeside(ctx context.Context, r *scenarioRun, t *target, round int) error {
	if r.baseSrcs[t] == nil {
		return nil
	}
	rec, lat, _, err := b.measure(ctx, r.base, t, r.baseSrcs[t], nil, "measure", round)
	if err == nil {
		addRound(r.beside, t, rec, lat, nil)
	}
	return err
}

// addRound adds a measured round of t to its results in m.
func addRound(m map[string]*targetResult, t *target, rec runRecord, lat, wlat []int64) {
	tr := m[t.name]
	if tr == nil {
		tr = &targetResult{}
		m[t.name] = tr
	}
	tr.rounds = append(tr.rounds, rec)
	tr.lat = append(tr.lat, lat...)
	tr.wlat = append(tr.wlat, wlat...)
}

// reportScenario writes the scenario's table, with what the million
// group's servers hold after it, and drops the latencies it no longer
// needs.
func (b *bench) reportScenario(r *scenarioRun) {
	sc := r.sc
	how := fmt.Sprintf("closed loop, %d connections", b.conns(sc))
	if sc.conns == 1 {
		how = "closed loop, 1 connection: one request at a time"
	}
	if sc.open {
		how = fmt.Sprintf("open loop at %g req/s, latency from each request's scheduled time", b.cfg.rate)
	}
	var names []string
	refOf := map[string]string{}
	for _, t := range r.group {
		names = append(names, t.name)
		refOf[t.name] = "ceiling"
		if t.group == "million" {
			refOf[t.name] = t.name
			if t.ref != nil {
				refOf[t.name] = t.ref.name
			}
		}
		if t.group == "history" {
			// No ceiling answers ?at=: the stores are compared.
			refOf[t.name] = r.group[0].name
		}
	}
	if sc.needs == "million" {
		// What the scenario left the server holding (for the search, a
		// flood of them: every request a prefix of its own).
		for _, t := range r.group {
			if rss, hwm, err := processMemory(t.proc.pid()); err == nil {
				t.memory = append(t.memory, memSample{sc.name, rss, hwm})
				progress("  %s: RSS %.1f MB, peak %.1f MB\n", t.name, float64(rss)/1e6, float64(hwm)/1e6)
			}
		}
	}
	switch {
	case sc.writes != nil:
		b.say("%s\n", mixedTable(sc, how, b.cfg.mixedRate, names, r.alone, r.res))
	case sc.needs == "million":
		b.say("%s\n", scenarioTable(sc, how, names, r.res, refOf, "the smaller instance"))
	case sc.needs == "history" && len(r.group) > 0:
		b.say("%s\n", scenarioTable(sc, how, names, r.res, refOf, r.group[0].name))
		for _, t := range r.group {
			b.say("- %s: %s\n", t.name, t.histLog)
		}
		b.say("\n")
	default:
		b.say("%s\n", scenarioTable(sc, how, names, r.res, refOf, "ceiling"))
	}
	// The latencies are in the table now; keep the memory down.
	for _, m := range []map[string]*targetResult{r.res, r.alone, r.beside} {
		for _, tr := range m {
			tr.lat, tr.wlat = nil, nil
		}
	}
}

// measure runs one round (or warm-up) of sc against t and accounts for it;
// with writes, those run beside it, in an open loop at -mixed-rate on one
// connection, and the server's CPU is charged to sc's requests.
func (b *bench) measure(ctx context.Context, sc scenario, t *target, src, writes *client.Source, phase string, round int) (runRecord, []int64, []int64, error) {
	spec := loadSpec{addr: t.addr, src: src, conns: b.conns(sc), seed: mrand.Uint64()}
	spec.duration = b.cfg.duration
	if phase == "warmup" {
		spec.duration = b.cfg.warmup
	}
	if sc.open {
		spec.rate = b.cfg.rate
	}
	// The CPU window is kept tight around the load: the processes are listed
	// before, sampled just before and just after, and only then are the
	// processes born during the run (new PostgreSQL backends) added.
	pids := t.pids(ctx)
	c0, m0, w0 := sampleCPU(pids), machineBusyTicks(), time.Now()
	var wres loadResult
	var werr error
	var wg sync.WaitGroup
	if writes != nil {
		wg.Add(1)
		go func() {
			defer wg.Done()
			wres, werr = runLoad(ctx, loadSpec{addr: t.addr, src: writes, conns: 1, duration: spec.duration, rate: b.cfg.mixedRate, seed: mrand.Uint64()})
		}()
	}
	res, err := runLoad(ctx, spec)
	wg.Wait()
	if err == nil {
		err = werr
	}
	if err != nil {
		return runRecord{}, nil, nil, err
	}
	c1, m1, window := sampleCPU(pids), machineBusyTicks(), time.Since(w0).Seconds()
	for k, v := range sampleCPU(slices.DeleteFunc(t.pids(ctx), func(p int) bool { return slices.Contains(pids, p) })) {
		c1[k] = v
	}
	if t.proc.exited() {
		return runRecord{}, nil, nil, fmt.Errorf("%s exited during %s (%v); its log %s ends:\n%s", t.name, sc.name, t.proc.err, t.logPath, tail(t.logPath, 2000))
	}
	srv := cpuDelta(c0, c1)
	sec := res.elapsed.Seconds()
	slices.Sort(res.lat)
	rec := runRecord{
		Scenario: sc.name, Target: t.name, Phase: phase, Round: round,
		Seconds: num(sec), Window: num(window),
		Requests: res.requests, OK: res.ok, Non2xx: res.non2xx, SockErrs: res.sockErrs,
		RPS:        num(float64(res.ok) / sec),
		SrvTicks:   srv,
		SrvUs:      num(perRequestMicros(srv, b.hz, res.requests)),
		SrvCores:   num(float64(srv) / b.hz / window),
		GenCores:   num(res.genCPU.Seconds() / sec),
		OtherCores: num((float64(m1-m0)/b.hz - float64(srv)/b.hz - res.genCPU.Seconds()) / window),
		P50ms:      num(ms(percentile(res.lat, 50))),
		P99ms:      num(ms(percentile(res.lat, 99))),
		MaxMs:      num(ms(percentile(res.lat, 100))),
		FirstBad:   res.firstBad,
	}
	rec.Variant = sc.variant
	if sc.writes != nil {
		rec.Variant = "alone"
		if writes != nil {
			slices.Sort(wres.lat)
			rec.Variant = "with_writes"
			rec.Writes, rec.WritesOK = wres.requests, wres.ok
			rec.WritesBad = wres.non2xx + wres.sockErrs
			rec.WriteP99ms = num(ms(percentile(wres.lat, 99)))
			if rec.FirstBad == "" {
				rec.FirstBad = wres.firstBad
			}
		}
	}
	if line, err := json.Marshal(rec); err == nil {
		_, _ = b.raw.Write(append(line, '\n'))
	}
	p := "r" + strconv.Itoa(round+1)
	if phase == "warmup" {
		p = "w "
	}
	extra := ""
	if writes != nil {
		extra = fmt.Sprintf("  + %d writes, p99 %s ms", rec.Writes, fmtNum(float64(rec.WriteP99ms)))
	}
	progress("  %s %-8s %8s req/s  %7s µs/req  p50 %s ms  p99 %s ms  err %d  srv %.2f gen %.2f other %.2f cores%s\n",
		p, t.name, fmtNum(float64(rec.RPS)), fmtNum(float64(rec.SrvUs)), fmtNum(float64(rec.P50ms)), fmtNum(float64(rec.P99ms)),
		rec.Non2xx+rec.SockErrs, float64(rec.SrvCores), float64(rec.GenCores), math.Max(0, float64(rec.OtherCores)), extra)
	if phase == "warmup" {
		return rec, nil, nil, nil
	}
	return rec, res.lat, wres.lat, nil
}

// preflight sends one request and returns its status (and the body's start
// when it is not a success).
func preflight(addr string, src *client.Source) (int, string, error) {
	c, err := client.Dial(addr)
	if err != nil {
		return 0, "", err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(30 * time.Second))
	var bufs client.RenderBufs
	resp, err := c.RoundTrip(src.Next(mrand.New(mrand.NewPCG(1, 2)), &bufs))
	if err != nil {
		return 0, "", err
	}
	return resp.Status, trunc(string(resp.Body), 300), nil
}

// conns is the connections of sc's closed loop.
func (b *bench) conns(sc scenario) int {
	if sc.conns > 0 {
		return sc.conns
	}
	return b.cfg.conns
}
