package main

import (
	"bufio"
	"context"
	"debug/elf"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// Command is the image's entrypoint and command with args in place of Cmd, as a
// container runtime would run it.
func (img Image) Command(args []string) ([]string, error) {
	argv := append([]string{}, img.Entrypoint...)
	if len(args) > 0 {
		argv = append(argv, args...)
	} else {
		argv = append(argv, img.Cmd...)
	}
	if len(argv) == 0 {
		return nil, errors.New("the image has neither Entrypoint nor Cmd")
	}
	if !path.IsAbs(argv[0]) {
		return nil, fmt.Errorf("entrypoint %q is not an absolute path (imagerun does not search PATH)", argv[0])
	}
	return argv, nil
}

// Credential is the image's User as numbers: "uid", "uid:gid", or a name looked up
// in the root's /etc/passwd. Empty means root.
func (img Image) Credential(root string) (uid, gid uint32, err error) {
	user, group, _ := strings.Cut(img.User, ":")
	if user == "" {
		return 0, 0, nil
	}
	u, uerr := strconv.ParseUint(user, 10, 32)
	g := u
	if uerr != nil {
		u, g, err = lookupPasswd(filepath.Join(root, "etc", "passwd"), user)
		if err != nil {
			return 0, 0, err
		}
	}
	if group != "" {
		gg, err := strconv.ParseUint(group, 10, 32)
		if err != nil {
			return 0, 0, fmt.Errorf("user %q: group %q is not numeric", img.User, group)
		}
		g = gg
	}
	return uint32(u), uint32(g), nil
}

func lookupPasswd(file, name string) (uid, gid uint64, err error) {
	f, err := os.Open(file)
	if err != nil {
		return 0, 0, fmt.Errorf("user %q: %w", name, err)
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		fields := strings.Split(s.Text(), ":")
		if len(fields) >= 4 && fields[0] == name {
			uid, err1 := strconv.ParseUint(fields[2], 10, 32)
			gid, err2 := strconv.ParseUint(fields[3], 10, 32)
			if err1 == nil && err2 == nil {
				return uid, gid, nil
			}
		}
	}
	return 0, 0, fmt.Errorf("user %q is not in the image's /etc/passwd", name)
}

// Mode says how the binary was started.
type Mode string

const (
	// Chroot: the image's root is the process's root, as the image's user.
	Chroot Mode = "chroot"
	// Direct: the binary from the unpacked root, through the image's own dynamic
	// loader and libraries when it has one, when chroot is not permitted.
	Direct Mode = "direct"
)

// Run starts the image unpacked at root with args and waits for it. mode "auto" tries
// chroot and falls back to direct, saying so on log, when chroot is not permitted.
func Run(ctx context.Context, img Image, root string, args []string, mode string, stdout, stderr, log io.Writer) (Mode, error) {
	argv, err := img.Command(args)
	if err != nil {
		return "", err
	}
	env := img.Env
	if len(env) == 0 {
		env = []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}
	}
	if mode == "auto" || mode == string(Chroot) {
		err := runChroot(ctx, img, root, argv, env, stdout, stderr)
		var start startError
		if mode == "auto" && errors.As(err, &start) && (errors.Is(err, syscall.EPERM) || errors.Is(err, syscall.EACCES)) {
			fmt.Fprintf(log, "imagerun: chroot into %s is not permitted here (%v); running the unpacked %s directly instead\n", root, start.err, argv[0])
			return Direct, runDirect(ctx, root, argv, env, stdout, stderr, log)
		}
		return Chroot, err
	}
	if mode != string(Direct) {
		return "", fmt.Errorf("mode %q: want auto, chroot or direct", mode)
	}
	return Direct, runDirect(ctx, root, argv, env, stdout, stderr, log)
}

// startError is a process that could not be started at all (as opposed to one that
// ran and failed).
type startError struct{ err error }

func (e startError) Error() string { return "starting: " + e.err.Error() }
func (e startError) Unwrap() error { return e.err }

func runChroot(ctx context.Context, img Image, root string, argv, env []string, stdout, stderr io.Writer) error {
	uid, gid, err := img.Credential(root)
	if err != nil {
		return err
	}
	wd := img.WorkingDir
	if wd == "" {
		wd = "/"
	}
	// A literal Cmd: exec.Command would look argv[0] up on the host, not in root.
	cmd := &exec.Cmd{
		Path: argv[0], Args: argv, Env: env, Dir: wd, Stdout: stdout, Stderr: stderr,
		SysProcAttr: &syscall.SysProcAttr{
			Chroot:     root,
			Credential: &syscall.Credential{Uid: uid, Gid: gid, NoSetGroups: uid == 0},
		},
	}
	if uid != 0 {
		cmd.SysProcAttr.Credential.Groups = []uint32{gid}
	}
	return startAndWait(ctx, cmd)
}

func runDirect(ctx context.Context, root string, argv, env []string, stdout, stderr, log io.Writer) error {
	bin := filepath.Join(root, filepath.FromSlash(argv[0]))
	interp, err := interpreter(bin)
	if err != nil {
		return err
	}
	var full []string
	if interp == "" {
		full = append([]string{bin}, argv[1:]...)
	} else {
		loader := filepath.Join(root, filepath.FromSlash(interp))
		if _, err := os.Stat(loader); err != nil {
			return fmt.Errorf("%s needs the loader %s, which the image lacks: %w", argv[0], interp, err)
		}
		// --inhibit-cache: not the host's /etc/ld.so.cache; the image's directories first.
		full = append([]string{loader, "--inhibit-cache", "--library-path", libraryPath(root), "--argv0", argv[0], bin}, argv[1:]...)
		fmt.Fprintf(log, "imagerun: %s through the image's loader %s\n", argv[0], interp)
	}
	cmd := &exec.Cmd{Path: full[0], Args: full, Env: env, Dir: root, Stdout: stdout, Stderr: stderr}
	return startAndWait(ctx, cmd)
}

func startAndWait(ctx context.Context, cmd *exec.Cmd) error {
	if err := cmd.Start(); err != nil {
		return startError{err}
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		_ = cmd.Process.Kill()
		<-done
		return fmt.Errorf("%s did not exit: %w", cmd.Args[0], ctx.Err())
	}
}

// interpreter is the ELF program interpreter (dynamic loader) of bin, "" when static
// or not ELF at all (a script: the kernel runs its #! line).
func interpreter(bin string) (string, error) {
	f, err := elf.Open(bin)
	var format *elf.FormatError
	if errors.As(err, &format) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("%s: %w", bin, err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			b, err := io.ReadAll(p.Open())
			if err != nil {
				return "", fmt.Errorf("%s: reading PT_INTERP: %w", bin, err)
			}
			return strings.TrimRight(string(b), "\x00"), nil
		}
	}
	return "", nil
}

// libraryPath lists the library directories the unpacked root has, as a glibc root
// lays them out (multiarch triplets first).
func libraryPath(root string) string {
	var dirs []string
	for _, d := range []string{"usr/lib", "lib", "usr/lib64", "lib64"} {
		if m, _ := filepath.Glob(filepath.Join(root, d, "*-linux-gnu*")); len(m) > 0 {
			for _, x := range m {
				if fi, err := os.Stat(x); err == nil && fi.IsDir() {
					dirs = append(dirs, x)
				}
			}
		}
	}
	for _, d := range []string{"usr/lib64", "lib64", "usr/lib", "lib"} {
		if fi, err := os.Stat(filepath.Join(root, d)); err == nil && fi.IsDir() {
			dirs = append(dirs, filepath.Join(root, d))
		}
	}
	return strings.Join(dirs, ":")
}
