// Command gantry is Gantry's command line, built like kubectl: cobra commands, the
// kubeconfig from --kubeconfig, $KUBECONFIG or ~/.kube/config, --context, and -n with
// the context's namespace as default (client-go's clientcmd, as kubectl binds it). Installed as
// kubectl-gantry on the PATH it is also a kubectl plugin: `kubectl gantry explain POD`.
//
// Each subcommand lives in its own file and registers itself in init (see sim.go), so
// adding one touches no other file. It is a thin main: flags and wiring only. What a
// subcommand does lives in pkg/.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"sort"
	"strings"

	"github.com/spf13/cobra"
)

// command is one `gantry NAME` subcommand.
type command struct {
	name string
	// summary is one line for `gantry help`.
	summary string
	// run gets the arguments after the subcommand's name, unparsed (the command parses
	// its own flags with package flag). Returning flag.ErrHelp means help was asked for
	// and already printed.
	run func(ctx context.Context, args []string) error
	// cobra, when set, builds the command instead: it gets the kubeconfig flags.
	cobra func(kube *kubeFlags) *cobra.Command
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

// usageError is a mistake in how a command was called.
type usageError struct{ msg string }

func (u usageError) Error() string { return u.msg }

// rootName is how the user called us: "kubectl gantry" as a kubectl plugin.
func rootName() string {
	if strings.HasPrefix(filepath.Base(os.Args[0]), "kubectl-") {
		return "kubectl gantry"
	}
	return "gantry"
}

// newRoot builds the command tree.
func newRoot(stdout, stderr io.Writer) *cobra.Command {
	kube := &kubeFlags{}
	root := &cobra.Command{
		Use:   rootName(),
		Short: "Gantry, a GPU-aware batch scheduler for Kubernetes",
		Long: "Gantry's command line. It reads the kubeconfig as kubectl does: --kubeconfig, else\n" +
			"$KUBECONFIG, else ~/.kube/config (and, when none exists, the running sandbox's).",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.SetOut(stdout)
	root.SetErr(stderr)
	kube.addFlags(root.PersistentFlags())
	names := make([]string, 0, len(commands))
	for name := range commands {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		c := commands[name]
		if c.cobra != nil {
			root.AddCommand(c.cobra(kube))
			continue
		}
		root.AddCommand(&cobra.Command{
			Use:                c.name,
			Short:              c.summary,
			DisableFlagParsing: true, // its own flag set parses them, -h included
			RunE: func(cmd *cobra.Command, args []string) error {
				return c.run(cmd.Context(), args)
			},
		})
	}
	return root
}

// run executes one command line and turns its outcome into an exit code: 0 success,
// 1 failure, 2 bad usage.
func run(ctx context.Context, args []string, stderr io.Writer) int {
	root := newRoot(os.Stdout, stderr)
	root.SetArgs(args)
	if len(args) == 0 {
		root.SetOut(stderr)
		_ = root.Usage()
		return 2
	}
	cmd, err := root.ExecuteContextC(ctx)
	if err == nil || errors.Is(err, flag.ErrHelp) {
		return 0
	}
	name := root.Name()
	if cmd != nil && cmd != root {
		name = cmd.CommandPath()
	}
	fmt.Fprintf(stderr, "%s: %v\n", name, err)
	var u usageError
	switch {
	case errors.As(err, &u):
		return 2
	case strings.HasPrefix(err.Error(), "unknown command"), strings.HasPrefix(err.Error(), "unknown flag"),
		strings.HasPrefix(err.Error(), "unknown shorthand flag"), strings.Contains(err.Error(), "accepts "),
		strings.Contains(err.Error(), "requires "), strings.Contains(err.Error(), "invalid argument"):
		fmt.Fprintln(stderr)
		root.SetOut(stderr)
		if cmd != nil {
			_ = cmd.Usage()
		}
		return 2
	}
	return 1
}
