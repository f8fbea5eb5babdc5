// Command kubelet-oracle runs cases (PROTOCOL.md) through the CPU, Memory and Topology Managers
// of k8s.io/kubernetes v1.37.2 and prints what they decided.
//
//	kubelet-oracle [-v N] [-state-dir DIR]            cases as JSON lines on stdin, answers on stdout
//	kubelet-oracle [-v N] [-state-dir DIR] FILE...    one case per file (JSON or YAML)
//
// Cases run one after another in one process: the managers read global feature gates, which each
// case sets and resets. A timing summary goes to stderr at exit.
package main

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/klog/v2"
	"sigs.k8s.io/yaml"
)

func main() {
	verbosity := flag.Int("v", -1, "log the kubelet's code to stderr at this klog verbosity (default: no logs)")
	stateDir := flag.String("state-dir", defaultStateDir(), "where each case's checkpoint directory is made (tmpfs is fastest)")
	flag.Parse()

	o := &oracle{ctx: klog.NewContext(context.Background(), setupLogging(*verbosity)), stateDir: *stateDir}
	out := bufio.NewWriter(os.Stdout)
	var err error
	if flag.NArg() > 0 {
		err = o.files(flag.Args(), out)
	} else {
		err = o.lines(os.Stdin, out)
	}
	summary(o.times)
	if err != nil {
		fmt.Fprintf(os.Stderr, "kubelet-oracle: %v\n", err)
		os.Exit(1)
	}
}

// oracle answers cases one after another.
type oracle struct {
	ctx      context.Context
	stateDir string
	times    []time.Duration
}

// lines answers each non-empty line of in (a JSON case) with one line on out, flushed at once.
func (o *oracle) lines(in io.Reader, out *bufio.Writer) error {
	r := bufio.NewReader(in)
	for {
		line, err := r.ReadBytes('\n')
		if len(bytes.TrimSpace(line)) > 0 {
			if werr := o.answer(line, "", out); werr != nil {
				return werr
			}
		}
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return fmt.Errorf("read stdin: %w", err)
		}
	}
}

// files answers the case in each file (JSON or YAML).
func (o *oracle) files(paths []string, out *bufio.Writer) error {
	for _, path := range paths {
		data, err := os.ReadFile(path)
		if err == nil {
			data, err = yaml.YAMLToJSON(data)
		}
		if err != nil {
			err = o.write(Answer{ID: path, Error: err.Error()}, 0, out)
		} else {
			err = o.answer(data, path, out)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// answer runs one case (fallbackID names it when it has no id) and writes the answer; only a
// failure to write is an error.
func (o *oracle) answer(data []byte, fallbackID string, out *bufio.Writer) error {
	start := time.Now()
	var ans Answer
	if c, err := decodeCase(data); err != nil {
		ans = Answer{ID: cmp.Or(c.ID, fallbackID), Error: err.Error()}
	} else {
		c.ID = cmp.Or(c.ID, fallbackID)
		ans = runCase(o.ctx, c, o.stateDir)
	}
	return o.write(ans, time.Since(start), out)
}

func (o *oracle) write(ans Answer, took time.Duration, out *bufio.Writer) error {
	o.times = append(o.times, took)
	if err := json.NewEncoder(out).Encode(ans); err != nil {
		return fmt.Errorf("write answer: %w", err)
	}
	if err := out.Flush(); err != nil {
		return fmt.Errorf("write answer: %w", err)
	}
	return nil
}

// decodeCase reads one case; unknown fields are refused so protocol mistakes show.
func decodeCase(data []byte) (*Case, error) {
	c := &Case{}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(c); err != nil {
		var id struct {
			ID string `json:"id"`
		}
		_ = json.Unmarshal(data, &id)
		c.ID = id.ID
		return c, fmt.Errorf("case: %w", err)
	}
	return c, nil
}

// setupLogging silences klog (the managers log every decision) unless a verbosity is asked for.
func setupLogging(verbosity int) logr.Logger {
	if verbosity < 0 {
		klog.SetLogger(logr.Discard())
		return logr.Discard()
	}
	fs := flag.NewFlagSet("klog", flag.ContinueOnError)
	klog.InitFlags(fs)
	_ = fs.Set("v", fmt.Sprint(verbosity))
	_ = fs.Set("logtostderr", "true")
	return klog.Background()
}

func defaultStateDir() string {
	if st, err := os.Stat("/dev/shm"); err == nil && st.IsDir() {
		return "/dev/shm"
	}
	return os.TempDir()
}

func summary(times []time.Duration) {
	if len(times) == 0 {
		return
	}
	var total time.Duration
	for _, t := range times {
		total += t
	}
	sorted := slices.Clone(times)
	slices.Sort(sorted)
	pct := func(p int) time.Duration { return sorted[(len(sorted)-1)*p/100] }
	fmt.Fprintf(os.Stderr, "kubelet-oracle: %d cases in %v: mean %v, p50 %v, p99 %v, max %v per case\n",
		len(times), total.Round(time.Millisecond), (total / time.Duration(len(times))).Round(time.Microsecond),
		pct(50).Round(time.Microsecond), pct(99).Round(time.Microsecond), sorted[len(sorted)-1].Round(time.Microsecond))
}
