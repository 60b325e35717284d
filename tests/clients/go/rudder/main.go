// Sends the plan's events through github.com/rudderlabs/analytics-go (v3.3.3+incompatible; its
// v4 module was refused by the Go module proxy here), used the way its README shows with only
// the data plane URL pointed at ingestd (the proxy), and prints the report (internal/plan). tests/clients/test_go_sdks.py builds and runs it.
//
//	rudder URL WRITE_KEY RUN_ID EVENTS_PER_TYPE FLUSH_AT BIG
package main

import (
	"fmt"
	"os"
	"time"

	"github.com/rudderlabs/analytics-go"

	"ingestd.test/clients/internal/plan"
)

type callback struct{ run *plan.Run }

func (c callback) Success(m analytics.Message)            { c.run.Settled(m, nil) }
func (c callback) Failure(m analytics.Message, err error) { c.run.Settled(m, err) }

func message(r *plan.Run, typ string, seq interface{}) analytics.Message {
	ctx := &analytics.Context{Extra: r.Context(seq)}
	user := fmt.Sprintf("user-%v", seq)
	props := analytics.NewProperties().Set("seq", seq)
	switch typ {
	case "identify":
		return analytics.Identify{UserId: user, Traits: analytics.NewTraits().Set("seq", seq), Context: ctx}
	case "page":
		return analytics.Page{UserId: user, Name: "Quick start", Properties: props, Context: ctx}
	case "screen":
		return analytics.Screen{UserId: user, Name: "Home", Properties: props, Context: ctx}
	case "group":
		return analytics.Group{UserId: user, GroupId: "group-1", Traits: analytics.NewTraits().Set("seq", seq), Context: ctx}
	case "alias":
		return analytics.Alias{UserId: user, PreviousId: fmt.Sprintf("anon-%v", seq), Context: ctx}
	}
	if seq == plan.BigSeq {
		props.Set("blob", plan.Blob())
	}
	return analytics.Track{UserId: user, Event: "Order Completed", Properties: props, Context: ctx}
}

func main() {
	r := plan.Parse()
	client, err := analytics.NewWithConfig(r.Key, r.URL, analytics.Config{
		BatchSize: r.FlushAt,
		Interval:  200 * time.Millisecond,
		Callback:  callback{r},
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, "config:", err)
		os.Exit(1)
	}
	r.Drive(func(typ string, seq interface{}) (interface{}, error) {
		m := message(r, typ, seq)
		return m, client.Enqueue(m)
	}, client.Close, "rudder", "github.com/rudderlabs/analytics-go", "v3.3.3+incompatible")
}
