// Command gantry is Gantry's command line. Each subcommand lives in its own file
// and registers itself in init (see sim.go), so adding one touches no other file.
//
// It is a thin main: flags and wiring only. What a subcommand does lives in pkg/.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"sort"
)

// command is one `gantry NAME` subcommand.
type command struct {
	name string
	// summary is one line for `gantry help`.
	summary string
	// run gets the arguments after the subcommand's name. Returning flag.ErrHelp
	// means help was asked for and already printed.
	run func(ctx context.Context, args []string) error
}

var commands = map[string]command{}

// register adds a subcommand; call it from an init function in the subcommand's file.
func register(c command) {
	if _, dup := commands[c.name]; dup {
		panic("gantry: subcommand registered twice: " + c.name)
	}
	commands[c.name] = c
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	code := run(ctx, os.Args[1:], os.Stderr)
	stop()
	os.Exit(code)
}

// run dispatches to a subcommand and turns its outcome into an exit code:
// 0 success, 1 failure, 2 bad usage.
func run(ctx context.Context, args []string, stderr io.Writer) int {
	if len(args) == 0 {
		usage(stderr)
		return 2
	}
	switch args[0] {
	case "help", "-h", "-help", "--help":
		usage(stderr)
		return 0
	}
	c, ok := commands[args[0]]
	if !ok {
		fmt.Fprintf(stderr, "gantry: unknown command %q\n\n", args[0])
		usage(stderr)
		return 2
	}
	if err := c.run(ctx, args[1:]); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		fmt.Fprintf(stderr, "gantry %s: %v\n", c.name, err)
		var u usageError
		if errors.As(err, &u) {
			return 2
		}
		return 1
	}
	return 0
}

// usageError is a mistake in how a command was called.
type usageError struct{ msg string }

func (u usageError) Error() string { return u.msg }

func usage(w io.Writer) {
	fmt.Fprintln(w, "usage: gantry COMMAND [ARGS]")
	fmt.Fprintln(w, "\ncommands:")
	names := make([]string, 0, len(commands))
	for name := range commands {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		fmt.Fprintf(w, "  %-10s %s\n", name, commands[name].summary)
	}
	fmt.Fprintln(w, "\nRun 'gantry COMMAND -h' for a command's flags.")
}
