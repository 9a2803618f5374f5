package main

import (
	"encoding/json"
	"fmt"
	"runtime"
	"runtime/debug"

	"github.com/spf13/cobra"
	"sigs.k8s.io/yaml"
)

// version is set at link time: -ldflags "-X main.version=v0.1.0" (make build, make
// images and the release workflow do).
var version = ""

func init() {
	register(command{name: "version", summary: "print the version", cobra: newVersionCmd})
}

type versionInfo struct {
	Version   string `json:"version"`
	GitCommit string `json:"gitCommit,omitempty"`
	GoVersion string `json:"goVersion"`
	Platform  string `json:"platform"`
}

func buildVersion() versionInfo {
	v := versionInfo{Version: version, GoVersion: runtime.Version(), Platform: runtime.GOOS + "/" + runtime.GOARCH}
	if bi, ok := debug.ReadBuildInfo(); ok {
		if v.Version == "" && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
			v.Version = bi.Main.Version // go install github.com/gantry-dev/gantry/cmd/gantry@vX
		}
		for _, s := range bi.Settings {
			if s.Key == "vcs.revision" {
				v.GitCommit = s.Value
			}
		}
	}
	if v.Version == "" {
		v.Version = "devel"
	}
	return v
}

func newVersionCmd(*kubeFlags) *cobra.Command {
	var output string
	cmd := &cobra.Command{
		Use:   "version",
		Short: "Print the version of this gantry binary",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			v := buildVersion()
			switch output {
			case "":
				fmt.Fprintf(cmd.OutOrStdout(), "gantry %s (commit %s, %s, %s)\n", v.Version, orUnknown(v.GitCommit), v.GoVersion, v.Platform)
				return nil
			default:
				return printData(cmd.OutOrStdout(), output, v)
			}
		},
	}
	addOutputFlag(cmd, &output)
	return cmd
}

func orUnknown(s string) string {
	if s == "" {
		return "unknown"
	}
	return s
}

// addOutputFlag adds kubectl's -o for commands whose output is data.
func addOutputFlag(cmd *cobra.Command, output *string) {
	cmd.Flags().StringVarP(output, "output", "o", "", "output format: json or yaml (default: text)")
	_ = cmd.RegisterFlagCompletionFunc("output", func(*cobra.Command, []string, string) ([]string, cobra.ShellCompDirective) {
		return []string{"json", "yaml"}, cobra.ShellCompDirectiveNoFileComp
	})
}

// printData writes v as JSON or YAML.
func printData(w interface{ Write([]byte) (int, error) }, format string, v any) error {
	switch format {
	case "json":
		b, err := json.MarshalIndent(v, "", "  ")
		if err != nil {
			return err
		}
		_, err = fmt.Fprintf(w, "%s\n", b)
		return err
	case "yaml":
		b, err := yaml.Marshal(v)
		if err != nil {
			return err
		}
		_, err = w.Write(b)
		return err
	default:
		return usageError{fmt.Sprintf("-o %s: use json or yaml (or leave -o out for text)", format)}
	}
}
