// Command imagerun starts an image's entrypoint from the image's own files, with no
// container engine: `make images-smoke` (hack/images/smoke.sh) exports each image with
// the tool that built it, and imagerun unpacks the archive's layers into a folder and
// runs the entrypoint there.
//
//	imagerun [-mode auto|chroot|direct] [-timeout 2m] ARCHIVE [ARGS...]
//
// As root it chroots into the unpacked root and runs as the image's USER. Where chroot
// is not permitted (not root, or a container without CAP_SYS_CHROOT), "auto" says so
// and runs the unpacked binary directly: a static binary as it is, a dynamic one
// through the image's own loader (its PT_INTERP) with the image's library
// directories. ARGS replace the image's Cmd, as `docker run IMAGE ARGS` does.
//
// The entrypoint's exit status is imagerun's; imagerun's own failures (a bad archive,
// an entrypoint that cannot start) exit 125, so a caller can tell them apart.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"time"
)

const ownFailure = 125

func main() {
	mode := flag.String("mode", "auto", "auto (chroot, else direct), chroot, or direct")
	timeout := flag.Duration("timeout", 2*time.Minute, "kill the entrypoint after this long")
	keep := flag.String("root", "", "unpack into this folder (must not exist) and keep it; default a temporary one")
	flag.Usage = func() {
		fmt.Fprintln(os.Stderr, "usage: imagerun [flags] ARCHIVE [ARGS...]   (ARCHIVE: oci-archive or docker-archive of one image)")
		flag.PrintDefaults()
	}
	flag.Parse()
	if flag.NArg() < 1 {
		flag.Usage()
		os.Exit(2)
	}
	os.Exit(run(flag.Arg(0), flag.Args()[1:], *mode, *keep, *timeout))
}

func run(archive string, args []string, mode, keep string, timeout time.Duration) int {
	work, err := os.MkdirTemp("", "imagerun-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "imagerun:", err)
		return ownFailure
	}
	defer os.RemoveAll(work)
	root := keep
	if root == "" {
		root = filepath.Join(work, "root")
	}
	if root, err = filepath.Abs(root); err != nil {
		fmt.Fprintln(os.Stderr, "imagerun:", err)
		return ownFailure
	}
	img, err := Unpack(archive, root, filepath.Join(work, "blobs"))
	if err != nil {
		fmt.Fprintln(os.Stderr, "imagerun:", err)
		return ownFailure
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	used, err := Run(ctx, img, root, args, mode, os.Stdout, os.Stderr, os.Stderr)
	var exit *exec.ExitError
	switch {
	case errors.As(err, &exit) && exit.ExitCode() >= 0:
		fmt.Fprintf(os.Stderr, "imagerun: %s (%s) exited %d\n", archive, used, exit.ExitCode())
		return exit.ExitCode()
	case err != nil:
		fmt.Fprintf(os.Stderr, "imagerun: %s: %v\n", archive, err)
		return ownFailure
	}
	fmt.Fprintf(os.Stderr, "imagerun: %s (%s) exited 0\n", archive, used)
	return 0
}
