package main

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"debug/elf"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

type entry struct {
	name, body, link string
	typ              byte
	mode             int64
}

func layerTar(t *testing.T, entries []entry, gz bool) []byte {
	t.Helper()
	var buf bytes.Buffer
	var w = &buf
	var zw *gzip.Writer
	tw := tar.NewWriter(w)
	if gz {
		zw = gzip.NewWriter(w)
		tw = tar.NewWriter(zw)
	}
	for _, e := range entries {
		h := &tar.Header{Name: e.name, Typeflag: e.typ, Mode: e.mode, Linkname: e.link, Size: int64(len(e.body))}
		if h.Mode == 0 {
			h.Mode = 0o644
		}
		if e.typ != tar.TypeReg {
			h.Size = 0
		}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if _, err := tw.Write([]byte(e.body)); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	if zw != nil {
		if err := zw.Close(); err != nil {
			t.Fatal(err)
		}
	}
	return buf.Bytes()
}

// ociArchive writes an oci-archive of one image with the given layers and config.
func ociArchive(t *testing.T, layers [][]byte, cfg Image) string {
	t.Helper()
	var files []entry
	blob := func(b []byte) string {
		sum := sha256.Sum256(b)
		h := hex.EncodeToString(sum[:])
		files = append(files, entry{name: "blobs/sha256/" + h, body: string(b), typ: tar.TypeReg})
		return "sha256:" + h
	}
	mustJSON := func(v any) []byte {
		b, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	type desc struct {
		Digest string `json:"digest"`
	}
	var m struct {
		Config desc   `json:"config"`
		Layers []desc `json:"layers"`
	}
	m.Config.Digest = blob(mustJSON(map[string]any{"config": cfg}))
	for _, l := range layers {
		m.Layers = append(m.Layers, desc{blob(l)})
	}
	idx := map[string]any{"manifests": []desc{{blob(mustJSON(m))}}}
	files = append(files, entry{name: "index.json", body: string(mustJSON(idx)), typ: tar.TypeReg})
	p := filepath.Join(t.TempDir(), "image.tar")
	if err := os.WriteFile(p, layerTar(t, files, false), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestUnpackAppliesLayersInOrderWithWhiteouts(t *testing.T) {
	base := layerTar(t, []entry{
		{name: "usr/", typ: tar.TypeDir, mode: 0o755},
		{name: "usr/lib/", typ: tar.TypeDir, mode: 0o755},
		{name: "lib", typ: tar.TypeSymlink, link: "usr/lib"},
		{name: "lib/libx.so.1", body: "x1", typ: tar.TypeReg},
		{name: "etc/gone", body: "old", typ: tar.TypeReg},
		{name: "opq/old", body: "old", typ: tar.TypeReg},
		{name: "escape", typ: tar.TypeSymlink, link: "/etc"},
	}, true)
	top := layerTar(t, []entry{
		{name: "etc/.wh.gone", typ: tar.TypeReg},
		{name: "opq/.wh..wh..opq", typ: tar.TypeReg},
		{name: "opq/new", body: "new", typ: tar.TypeReg},
		{name: "usr/bin/tool", body: "#!/bin/sh\n", typ: tar.TypeReg, mode: 0o755},
		{name: "usr/bin/tool-link", typ: tar.TypeLink, link: "usr/bin/tool"},
	}, false)
	archive := ociArchive(t, [][]byte{base, top}, Image{Entrypoint: []string{"/usr/bin/tool"}, User: "65532:65532"})
	root := filepath.Join(t.TempDir(), "root")
	img, err := Unpack(archive, root, filepath.Join(t.TempDir(), "blobs"))
	if err != nil {
		t.Fatal(err)
	}
	if img.User != "65532:65532" || len(img.Entrypoint) != 1 || img.Entrypoint[0] != "/usr/bin/tool" {
		t.Fatalf("config = %+v", img)
	}
	read := func(p string) string {
		b, err := os.ReadFile(filepath.Join(root, p))
		if err != nil {
			return "<" + err.Error() + ">"
		}
		return string(b)
	}
	if got := read("usr/lib/libx.so.1"); got != "x1" {
		t.Errorf("file written through the relative symlink lib: %q", got)
	}
	if _, err := os.Lstat(filepath.Join(root, "etc/gone")); !os.IsNotExist(err) {
		t.Errorf("whiteout left etc/gone: %v", err)
	}
	if _, err := os.Lstat(filepath.Join(root, "opq/old")); !os.IsNotExist(err) {
		t.Errorf("opaque whiteout left opq/old: %v", err)
	}
	if got := read("opq/new"); got != "new" {
		t.Errorf("opq/new = %q", got)
	}
	if fi, err := os.Stat(filepath.Join(root, "usr/bin/tool")); err != nil || fi.Mode().Perm() != 0o755 {
		t.Errorf("usr/bin/tool: %v %v", fi, err)
	}
	if got := read("usr/bin/tool-link"); got != "#!/bin/sh\n" {
		t.Errorf("hard link = %q", got)
	}
	if l, err := os.Readlink(filepath.Join(root, "escape")); err != nil || l != "/etc" {
		t.Errorf("symlink escape = %q, %v (kept as a link, never followed)", l, err)
	}
}

func TestUnpackRefusesWritesThroughAnEscapingSymlink(t *testing.T) {
	outside := t.TempDir()
	layer := layerTar(t, []entry{
		{name: "out", typ: tar.TypeSymlink, link: outside},
		{name: "out/pwned", body: "x", typ: tar.TypeReg},
	}, false)
	archive := ociArchive(t, [][]byte{layer}, Image{Entrypoint: []string{"/x"}})
	_, err := Unpack(archive, filepath.Join(t.TempDir(), "root"), filepath.Join(t.TempDir(), "blobs"))
	if err == nil {
		t.Fatal("Unpack wrote through a symlink out of the root")
	}
	if _, serr := os.Stat(filepath.Join(outside, "pwned")); !os.IsNotExist(serr) {
		t.Fatalf("a file was written outside the root: %v", serr)
	}
}

func TestUnpackDockerArchive(t *testing.T) {
	layer := layerTar(t, []entry{{name: "bin/x", body: "x", typ: tar.TypeReg}}, false)
	cfg, _ := json.Marshal(map[string]any{"config": Image{Entrypoint: []string{"/bin/x"}}})
	man, _ := json.Marshal([]map[string]any{{"Config": "cfg.json", "Layers": []string{"l1/layer.tar"}}})
	p := filepath.Join(t.TempDir(), "d.tar")
	if err := os.WriteFile(p, layerTar(t, []entry{
		{name: "cfg.json", body: string(cfg), typ: tar.TypeReg},
		{name: "l1/layer.tar", body: string(layer), typ: tar.TypeReg},
		{name: "manifest.json", body: string(man), typ: tar.TypeReg},
	}, false), 0o644); err != nil {
		t.Fatal(err)
	}
	root := filepath.Join(t.TempDir(), "root")
	img, err := Unpack(p, root, filepath.Join(t.TempDir(), "blobs"))
	if err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(filepath.Join(root, "bin/x")); err != nil || string(b) != "x" || img.Entrypoint[0] != "/bin/x" {
		t.Fatalf("bin/x = %q %v, config %+v", b, err, img)
	}
}

func TestUnpackNotAnImage(t *testing.T) {
	p := filepath.Join(t.TempDir(), "x.tar")
	os.WriteFile(p, layerTar(t, []entry{{name: "hello", body: "x", typ: tar.TypeReg}}, false), 0o644)
	_, err := Unpack(p, filepath.Join(t.TempDir(), "root"), filepath.Join(t.TempDir(), "blobs"))
	if err == nil || !strings.Contains(err.Error(), "neither index.json") {
		t.Fatalf("err = %v, want one naming the missing index.json/manifest.json", err)
	}
}

// The test binary itself as an image's entrypoint; with IMAGERUN_HELPER set it prints
// its uid, gid, working directory and arguments.
func TestMain(m *testing.M) {
	if os.Getenv("IMAGERUN_HELPER") != "" {
		wd, _ := os.Getwd()
		fmt.Printf("uid=%d gid=%d wd=%s args=%q\n", os.Getuid(), os.Getgid(), wd, os.Args[1:])
		os.Exit(3)
	}
	os.Exit(m.Run())
}

// selfImage unpacks an image holding the test binary and, when it is dynamic, the
// host's loader and the libraries it names, at their host paths: the layout of the
// node agent's glibc image.
func selfImage(t *testing.T) (Image, string) {
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	files := []entry{{name: "app/self", body: readFile(t, self), typ: tar.TypeReg, mode: 0o755}}
	interp, err := interpreter(self)
	if err != nil {
		t.Fatal(err)
	}
	if interp != "" {
		files = append(files, entry{name: strings.TrimPrefix(interp, "/"), body: readFile(t, interp), typ: tar.TypeReg, mode: 0o755})
		f, err := elf.Open(self)
		if err != nil {
			t.Fatal(err)
		}
		libs, err := f.ImportedLibraries()
		f.Close()
		if err != nil {
			t.Fatal(err)
		}
		for _, lib := range libs {
			found := ""
			for _, d := range []string{"/lib/x86_64-linux-gnu", "/usr/lib/x86_64-linux-gnu", "/lib/aarch64-linux-gnu", "/usr/lib/aarch64-linux-gnu", "/lib64", "/usr/lib64", "/lib", "/usr/lib"} {
				if _, err := os.Stat(filepath.Join(d, lib)); err == nil {
					found = filepath.Join(d, lib)
					break
				}
			}
			if found == "" {
				t.Skipf("cannot find %s, which the test binary needs, on this host", lib)
			}
			files = append(files, entry{name: strings.TrimPrefix(found, "/"), body: readFile(t, found), typ: tar.TypeReg, mode: 0o755})
		}
	}
	layer := layerTar(t, files, false)
	img := Image{Entrypoint: []string{"/app/self"}, Cmd: []string{"default"}, Env: []string{"IMAGERUN_HELPER=1"}, User: "65532:65532"}
	root := filepath.Join(t.TempDir(), "root")
	if err := os.Chmod(filepath.Dir(root), 0o755); err != nil {
		t.Fatal(err)
	}
	got, err := Unpack(ociArchive(t, [][]byte{layer}, img), root, filepath.Join(t.TempDir(), "blobs"))
	if err != nil {
		t.Fatal(err)
	}
	return got, root
}

func readFile(t *testing.T, p string) string {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestRunDirect(t *testing.T) {
	img, root := selfImage(t)
	var out, log bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	mode, err := Run(ctx, img, root, nil, "direct", &out, &out, &log)
	if mode != Direct || err == nil || !strings.Contains(err.Error(), "exit status 3") {
		t.Fatalf("mode %s, err %v, want direct and exit status 3; output %q", mode, err, out.String())
	}
	if !strings.Contains(out.String(), `args=["default"]`) {
		t.Errorf("output %q: want the image's Cmd as args", out.String())
	}
}

func TestRunChrootAsTheImagesUser(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("chroot needs root")
	}
	img, root := selfImage(t)
	var out, log bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	mode, err := Run(ctx, img, root, []string{"a", "b"}, "auto", &out, &out, &log)
	if mode == Direct {
		t.Skipf("chroot not permitted here: %s", log.String())
	}
	if err == nil || !strings.Contains(err.Error(), "exit status 3") {
		t.Fatalf("err %v, want exit status 3; output %q", err, out.String())
	}
	if want := `uid=65532 gid=65532 wd=/ args=["a" "b"]`; !strings.Contains(out.String(), want) {
		t.Errorf("output %q, want %q (chrooted, as the image's USER, ARGS replacing Cmd)", out.String(), want)
	}
}
