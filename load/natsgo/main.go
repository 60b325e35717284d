// natsgo-load: the workload of ingestd-nats-load (load/nats_load.c), published with the official
// nats.go client (JetStream async publish), so that load/compare can check that the project's
// own NATS load tool measures the same rate on the same server.
//
// Same options, same workload and the same `SUMMARY key=value ...` line as ingestd-nats-load:
// --connections NATS connections, each keeping --inflight messages published and not yet
// acknowledged (a semaphore released by the PubAck), each message with a Nats-Msg-Id header
// "<run>-<16 hex of N>" and an event of --event-bytes bytes carrying the same id; with
// probability --dup-ratio a message re-sends the id of an earlier one, chosen uniformly.
// --create-stream NAME first creates a file-storage stream on the subject with a 24 h
// duplicate window. Latency is from the publish call to the PubAck callback.
package main

import (
	"context"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

const (
	binUS = 10     // latency histogram: 10 µs bins ...
	bins  = 200000 // ... up to 2 s (the last bin holds the rest), as in nats_load.c
)

var (
	nextID, published, acks, dups, errs atomic.Uint64
	latMax                              atomic.Uint64
	hist                                [bins]atomic.Uint64
)

func die(format string, a ...any) {
	fmt.Fprintf(os.Stderr, "natsgo-load: "+format+"\n", a...)
	os.Exit(1)
}

func record(t0 time.Time) {
	us := uint64(time.Since(t0).Microseconds())
	b := us / binUS
	if b >= bins {
		b = bins - 1
	}
	hist[b].Add(1)
	for {
		m := latMax.Load()
		if us <= m || latMax.CompareAndSwap(m, us) {
			return
		}
	}
}

func pct(q float64, n uint64) float64 {
	var seen uint64
	want := uint64(q*float64(n) + 0.5)
	for i := 0; i < bins; i++ {
		if seen += hist[i].Load(); seen >= want && want > 0 {
			return (float64(i) + 0.5) * binUS / 1000.0
		}
	}
	return 0
}

// publisher is one connection with its own JetStream context and in-flight window.
type publisher struct {
	js   jetstream.JetStream
	sem  chan struct{}
	mu   sync.Mutex
	sent map[*nats.Msg]time.Time
}

func (p *publisher) done(m *nats.Msg) {
	p.mu.Lock()
	t0, ok := p.sent[m]
	delete(p.sent, m)
	p.mu.Unlock()
	if ok {
		record(t0)
	}
	<-p.sem
}

func main() {
	port := flag.Int("port", 0, "nats-server port on 127.0.0.1")
	subject := flag.String("subject", "ingest.events", "subject to publish on")
	stream := flag.String("create-stream", "", "create this file-storage stream on the subject first")
	conns := flag.Int("connections", 8, "NATS connections")
	inflight := flag.Int("inflight", 256, "messages in flight per connection")
	eventBytes := flag.Int("event-bytes", 400, "bytes per event")
	dupRatio := flag.Float64("dup-ratio", 0, "share of messages re-sending an earlier id")
	seconds := flag.Float64("duration", 10, "seconds to publish")
	quiet := flag.Bool("quiet", false, "no per-second progress on stderr")
	flag.Parse()
	if *port < 1 || *port > 65535 || *conns < 1 || *conns > 256 || *inflight < 1 ||
		*inflight > 8192 || *eventBytes < 100 || *eventBytes > 65536 || *dupRatio < 0 ||
		*dupRatio >= 1 || *seconds <= 0 || flag.NArg() > 0 {
		flag.Usage()
		os.Exit(2)
	}
	url := fmt.Sprintf("nats://127.0.0.1:%d", *port)
	runID := fmt.Sprintf("%08x", rand.Uint32())
	tmpl := fmt.Sprintf(`{"type":"track","event":"Load Test","userId":"user-1",`+
		`"messageId":"%s-0000000000000000","properties":{"pad":"`, runID)
	if *eventBytes < len(tmpl)+3 {
		die("--event-bytes too small")
	}
	payload := []byte(tmpl + strings.Repeat("x", *eventBytes-len(tmpl)-3) + `"}}`)
	idOff := strings.Index(tmpl, "-0000000000000000") + 1

	if *stream != "" {
		nc, err := nats.Connect(url, nats.Name("natsgo-load"))
		if err != nil {
			die("connect: %v", err)
		}
		js, _ := jetstream.New(nc)
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		_, err = js.CreateStream(ctx, jetstream.StreamConfig{
			Name: *stream, Subjects: []string{*subject}, Storage: jetstream.FileStorage,
			Retention: jetstream.LimitsPolicy, Replicas: 1, Duplicates: 24 * time.Hour,
		})
		cancel()
		if err != nil {
			die("stream create: %v", err)
		}
		nc.Close()
	}

	pubs := make([]*publisher, *conns)
	for i := range pubs {
		p := &publisher{sem: make(chan struct{}, *inflight), sent: make(map[*nats.Msg]time.Time)}
		nc, err := nats.Connect(url, nats.Name("natsgo-load"))
		if err != nil {
			die("connect: %v", err)
		}
		defer nc.Close()
		// The library's own cap is above ours: the semaphore is released in the ack callback,
		// which runs before the library forgets the ack.
		p.js, err = jetstream.New(nc, jetstream.WithPublishAsyncMaxPending(2**inflight+16),
			jetstream.WithPublishAsyncAckHandler(func(_ jetstream.JetStream, m *nats.Msg, a *jetstream.PubAck) {
				acks.Add(1)
				if a.Duplicate {
					dups.Add(1)
				}
				p.done(m)
			}),
			jetstream.WithPublishAsyncErrHandler(func(_ jetstream.JetStream, m *nats.Msg, err error) {
				errs.Add(1)
				p.done(m)
			}))
		if err != nil {
			die("jetstream: %v", err)
		}
		pubs[i] = p
	}

	t0 := time.Now()
	end := t0.Add(time.Duration(*seconds * float64(time.Second)))
	var wg sync.WaitGroup
	for _, p := range pubs {
		wg.Add(1)
		go func(p *publisher) {
			defer wg.Done()
			for time.Now().Before(end) {
				p.sem <- struct{}{}
				id := nextID.Load()
				if id > 0 && rand.Float64() < *dupRatio {
					id = rand.Uint64N(id)
				} else {
					id = nextID.Add(1) - 1
				}
				hex := fmt.Sprintf("%016x", id)
				data := make([]byte, len(payload))
				copy(data, payload)
				copy(data[idOff:], hex) // the payload carries the id too: a re-send is exact
				m := &nats.Msg{Subject: *subject, Data: data}
				p.mu.Lock()
				p.sent[m] = time.Now()
				p.mu.Unlock()
				if _, err := p.js.PublishMsgAsync(m, jetstream.WithMsgID(runID+"-"+hex)); err != nil {
					die("publish: %v", err)
				}
				published.Add(1)
			}
		}(p)
	}
	if !*quiet {
		go func() {
			var last uint64
			for range time.Tick(time.Second) {
				a := acks.Load()
				fmt.Fprintf(os.Stderr, "natsgo-load: %4.0f s  %9d acks/s  %d acks, %d dup\n",
					time.Since(t0).Seconds(), a-last, a, dups.Load())
				last = a
			}
		}()
	}
	wg.Wait()
	drain := time.After(30 * time.Second) // wait up to 30 s for the acks in flight
	for _, p := range pubs {
		select {
		case <-p.js.PublishAsyncComplete():
		case <-drain:
		}
	}
	secs := time.Since(t0).Seconds()
	a, e, pub := acks.Load(), errs.Load(), published.Load()
	n := a + e
	var lost uint64
	if pub > n {
		lost = pub - n
	}
	fmt.Printf("published %d, acknowledged %d (%d duplicates), %d errors, %d unanswered\n"+
		"%.0f acks/s over %.3f s; ack latency p50 %.3f ms p99 %.3f ms max %.3f ms\n",
		pub, a, dups.Load(), e, lost, float64(a)/secs, secs, pct(0.5, n), pct(0.99, n),
		float64(latMax.Load())/1000.0)
	fmt.Printf("SUMMARY run_id=%s seconds=%.3f connections=%d inflight=%d event_bytes=%d "+
		"dup_ratio=%.4f published=%d acks=%d duplicates=%d errors=%d unanswered=%d "+
		"events_per_s=%.0f p50_ms=%.3f p99_ms=%.3f max_ms=%.3f client=nats.go\n",
		runID, secs, *conns, *inflight, *eventBytes, *dupRatio, pub, a, dups.Load(), e, lost,
		float64(a)/secs, pct(0.5, n), pct(0.99, n), float64(latMax.Load())/1000.0)
	if e > 0 || lost > 0 {
		os.Exit(1)
	}
}
