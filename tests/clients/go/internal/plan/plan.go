// Package plan is what the Go senders share: the events to send, the context that tags each with
// the run and its sequence number, the callbacks' bookkeeping and the JSON report that
// tests/clients/sdkcase.py reads. The SDK calls themselves are in each sender's main.go.
package plan

import (
	"encoding/json"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Types are the six Segment event types, in the order the senders cycle through them.
var Types = []string{"track", "identify", "page", "screen", "group", "alias"}

// BigSeq tags the one event over 32 KB.
const BigSeq = "big"

// BigBytes is the size of that event's blob property: over every SDK's 32 KB message limit.
const BigBytes = 40 * 1024

// Event is one sent event as the report lists it.
type Event struct {
	Type      string `json:"type"`
	Seq       int    `json:"seq"`
	MessageID string `json:"messageId,omitempty"`
	Error     string `json:"error,omitempty"`
}

// Big is what became of the event over 32 KB.
type Big struct {
	MessageID string `json:"messageId,omitempty"`
	Error     string `json:"error,omitempty"`
}

// Run holds the command line and what the SDK's callbacks reported.
type Run struct {
	URL, Key, RunID string
	PerType         int
	FlushAt         int
	SendBig         bool
	Events          []*Event

	mu      sync.Mutex
	pending int
	done    chan struct{}
	big     *Big
	errors  []string
}

// Parse reads URL WRITE_KEY RUN_ID EVENTS_PER_TYPE FLUSH_AT BIG; exits 2 on a bad command line.
func Parse() *Run {
	a := os.Args[1:]
	if len(a) != 6 {
		fmt.Fprintf(os.Stderr, "usage: %s URL WRITE_KEY RUN_ID EVENTS_PER_TYPE FLUSH_AT BIG\n",
			os.Args[0])
		os.Exit(2)
	}
	perType, err1 := strconv.Atoi(a[3])
	flushAt, err2 := strconv.Atoi(a[4])
	if err1 != nil || err2 != nil {
		fmt.Fprintln(os.Stderr, "EVENTS_PER_TYPE and FLUSH_AT are numbers")
		os.Exit(2)
	}
	r := &Run{URL: a[0], Key: a[1], RunID: a[2], PerType: perType, FlushAt: flushAt,
		SendBig: a[5] == "1", done: make(chan struct{})}
	for i := 0; i < perType*len(Types); i++ {
		r.Events = append(r.Events, &Event{Type: Types[i%len(Types)], Seq: i})
	}
	r.pending = len(r.Events)
	if r.SendBig {
		r.pending++
	}
	return r
}

// Context is the context.test value that tags an event (seq is an int, or BigSeq).
func (r *Run) Context(seq interface{}) map[string]interface{} {
	return map[string]interface{}{"test": map[string]interface{}{"run": r.RunID, "seq": seq}}
}

// Blob is the property that makes the big event big.
func Blob() string { return strings.Repeat("x", BigBytes) }

// Settled records the SDK's callback (or Enqueue's refusal) for message m, one of the SDK's
// message structs: its messageId and context.test are read from its JSON, the same for both SDKs.
func (r *Run) Settled(m interface{}, err error) {
	var doc struct {
		MessageID string `json:"messageId"`
		Context   struct {
			Test struct {
				Seq interface{} `json:"seq"`
			} `json:"test"`
		} `json:"context"`
	}
	if b, jerr := json.Marshal(m); jerr == nil {
		_ = json.Unmarshal(b, &doc)
	}
	messageID := doc.MessageID
	r.mu.Lock()
	defer r.mu.Unlock()
	switch seq := doc.Context.Test.Seq.(type) {
	case float64:
		e := r.Events[int(seq)]
		e.MessageID = messageID
		if err != nil {
			e.Error = err.Error()
			r.errors = append(r.errors, err.Error())
		}
	case string:
		r.big = &Big{MessageID: messageID}
		if err != nil {
			r.big.Error = err.Error()
		}
	default:
		r.errors = append(r.errors, "callback for an event without context.test")
		return
	}
	r.pending--
	if r.pending == 0 {
		close(r.done)
	}
}

// Drive enqueues every event (and the big one) with enqueue, waits for every callback, calls
// closeClient and prints the report; exits 3 when callbacks are missing after 90 s. It waits
// before closing because both SDKs' Close() abandons a batch that is waiting for a retry.
func (r *Run) Drive(enqueue func(typ string, seq interface{}) (interface{}, error),
	closeClient func() error, sdk, pkg, version string) {
	for _, e := range r.Events {
		if m, err := enqueue(e.Type, e.Seq); err != nil {
			r.Settled(m, err) // refused at once: no callback will come
		}
	}
	if r.SendBig {
		if m, err := enqueue("track", BigSeq); err != nil {
			r.Settled(m, err)
		}
	}
	var ok bool
	select {
	case <-r.done:
		ok = true
	case <-time.After(90 * time.Second):
	}
	if err := closeClient(); err != nil {
		fmt.Fprintln(os.Stderr, "Close:", err)
	}
	if !ok {
		fmt.Fprintln(os.Stderr, "events not all settled after 90 s")
		os.Exit(3)
	}
	r.report(sdk, pkg, version)
}

func (r *Run) report(sdk, pkg, version string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	errs := append([]string{}, r.errors...) // [] rather than null in the JSON
	out, _ := json.Marshal(map[string]interface{}{"sdk": sdk, "package": pkg, "version": version,
		"events": r.Events, "errors": errs, "big": r.big})
	fmt.Println(string(out))
}
