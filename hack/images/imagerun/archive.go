package main

import (
	"archive/tar"
	"bufio"
	"bytes"
	"compress/gzip"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"
)

// Image is what running an image needs from its configuration.
type Image struct {
	Entrypoint []string
	Cmd        []string
	Env        []string
	User       string
	WorkingDir string
}

type ociIndex struct {
	Manifests []struct {
		Digest string `json:"digest"`
	} `json:"manifests"`
}

type ociManifest struct {
	Config struct {
		Digest string `json:"digest"`
	} `json:"config"`
	Layers []struct {
		Digest string `json:"digest"`
	} `json:"layers"`
}

// dockerManifest is manifest.json of `docker save` (docker-archive).
type dockerManifest []struct {
	Config string   `json:"Config"`
	Layers []string `json:"Layers"`
}

type imageConfig struct {
	Config Image `json:"config"`
}

// Unpack reads an image archive (oci-archive from buildah push or podman save, or
// docker-archive from docker save), applies its layers in order into root, which must
// not exist yet, and returns the image's configuration. scratch holds the archive's
// blobs while it works.
func Unpack(archive, root, scratch string) (Image, error) {
	if err := extractArchive(archive, scratch); err != nil {
		return Image{}, fmt.Errorf("reading %s: %w", archive, err)
	}
	configPath, layers, err := readManifest(scratch)
	if err != nil {
		return Image{}, fmt.Errorf("%s: %w", archive, err)
	}
	data, err := os.ReadFile(configPath)
	if err != nil {
		return Image{}, fmt.Errorf("%s: image config: %w", archive, err)
	}
	var cfg imageConfig
	if err := json.Unmarshal(data, &cfg); err != nil {
		return Image{}, fmt.Errorf("%s: image config %s: %w", archive, filepath.Base(configPath), err)
	}
	if err := os.Mkdir(root, 0o755); err != nil {
		return Image{}, err
	}
	r, err := os.OpenRoot(root)
	if err != nil {
		return Image{}, err
	}
	defer r.Close()
	for i, l := range layers {
		if err := applyLayer(r, l); err != nil {
			return Image{}, fmt.Errorf("%s: layer %d of %d (%s): %w", archive, i+1, len(layers), filepath.Base(l), err)
		}
	}
	return cfg.Config, nil
}

// extractArchive writes the regular files of the outer archive under dir.
func extractArchive(archive, dir string) error {
	f, err := os.Open(archive)
	if err != nil {
		return err
	}
	defer f.Close()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	r, err := os.OpenRoot(dir)
	if err != nil {
		return err
	}
	defer r.Close()
	return eachEntry(f, func(tr *tar.Reader, h *tar.Header, name string) error {
		if h.Typeflag != tar.TypeReg {
			return nil
		}
		if d := path.Dir(name); d != "." {
			if err := r.MkdirAll(d, 0o755); err != nil {
				return err
			}
		}
		out, err := r.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
		if err != nil {
			return err
		}
		_, err = io.Copy(out, tr)
		if cerr := out.Close(); err == nil {
			err = cerr
		}
		return err
	})
}

// eachEntry calls fn for every entry of the tar stream in, with its name relative to
// the archive's root ("../x" and "/x" become "x"); the root itself is skipped.
func eachEntry(in io.Reader, fn func(tr *tar.Reader, h *tar.Header, name string) error) error {
	tr := tar.NewReader(in)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		if name := strings.TrimPrefix(path.Clean("/"+h.Name), "/"); name != "" {
			if err := fn(tr, h, name); err != nil {
				return err
			}
		}
	}
}

// readManifest finds the config and the layers, in order, of the archive's only image.
func readManifest(dir string) (config string, layers []string, err error) {
	if data, err := os.ReadFile(filepath.Join(dir, "index.json")); err == nil {
		var idx ociIndex
		if err := json.Unmarshal(data, &idx); err != nil {
			return "", nil, fmt.Errorf("index.json: %w", err)
		}
		if len(idx.Manifests) != 1 {
			return "", nil, fmt.Errorf("index.json lists %d manifests, want the one of a single image", len(idx.Manifests))
		}
		var m ociManifest
		if err := readBlobJSON(dir, idx.Manifests[0].Digest, &m); err != nil {
			return "", nil, fmt.Errorf("manifest: %w", err)
		}
		config, err = blobPath(dir, m.Config.Digest)
		if err != nil {
			return "", nil, err
		}
		for _, l := range m.Layers {
			p, err := blobPath(dir, l.Digest)
			if err != nil {
				return "", nil, err
			}
			layers = append(layers, p)
		}
		return config, layers, nil
	}
	data, err := os.ReadFile(filepath.Join(dir, "manifest.json"))
	if err != nil {
		return "", nil, errors.New("neither index.json (oci-archive) nor manifest.json (docker-archive) in it")
	}
	var dm dockerManifest
	if err := json.Unmarshal(data, &dm); err != nil {
		return "", nil, fmt.Errorf("manifest.json: %w", err)
	}
	if len(dm) != 1 {
		return "", nil, fmt.Errorf("manifest.json lists %d images, want one", len(dm))
	}
	for _, l := range dm[0].Layers {
		layers = append(layers, filepath.Join(dir, filepath.FromSlash(path.Clean("/"+l))))
	}
	return filepath.Join(dir, filepath.FromSlash(path.Clean("/"+dm[0].Config))), layers, nil
}

func blobPath(dir, digest string) (string, error) {
	algo, hex, ok := strings.Cut(digest, ":")
	if !ok || algo == "" || hex == "" || strings.ContainsAny(digest, "/\\.") {
		return "", fmt.Errorf("bad digest %q", digest)
	}
	return filepath.Join(dir, "blobs", algo, hex), nil
}

func readBlobJSON(dir, digest string, v any) error {
	p, err := blobPath(dir, digest)
	if err != nil {
		return err
	}
	data, err := os.ReadFile(p)
	if err != nil {
		return err
	}
	return json.Unmarshal(data, v)
}

// layerReader opens a layer blob, uncompressed or gzip.
func layerReader(f *os.File) (io.Reader, error) {
	br := bufio.NewReader(f)
	magic, _ := br.Peek(4)
	switch {
	case bytes.HasPrefix(magic, []byte{0x1f, 0x8b}):
		return gzip.NewReader(br)
	case bytes.Equal(magic, []byte{0x28, 0xb5, 0x2f, 0xfd}):
		return nil, errors.New("zstd-compressed layer: export the image with gzip or uncompressed layers")
	}
	return br, nil
}

// applyLayer applies one layer tar to r: files, directories, links, and the OCI
// whiteouts (.wh.NAME removes NAME, .wh..wh..opq empties the directory). r confines
// every path and symlink to the root.
func applyLayer(r *os.Root, layer string) error {
	f, err := os.Open(layer)
	if err != nil {
		return err
	}
	defer f.Close()
	lr, err := layerReader(f)
	if err != nil {
		return err
	}
	asRoot := os.Geteuid() == 0
	return eachEntry(lr, func(tr *tar.Reader, h *tar.Header, name string) error {
		dir, base := path.Split(name)
		dir = strings.TrimSuffix(dir, "/")
		if dir != "" {
			if err := r.MkdirAll(dir, 0o755); err != nil {
				return err
			}
		}
		if base == ".wh..wh..opq" {
			return emptyDir(r, dir)
		}
		if strings.HasPrefix(base, ".wh.") {
			return r.RemoveAll(path.Join(dir, strings.TrimPrefix(base, ".wh.")))
		}
		if err := applyEntry(r, tr, h, name); err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		if asRoot && h.Typeflag != tar.TypeLink {
			return r.Lchown(name, h.Uid, h.Gid)
		}
		return nil
	})
}

func applyEntry(r *os.Root, tr *tar.Reader, h *tar.Header, name string) error {
	mode := fs.FileMode(h.Mode) & fs.ModePerm
	if fi, err := r.Lstat(name); err == nil && !(fi.IsDir() && h.Typeflag == tar.TypeDir) {
		if err := r.RemoveAll(name); err != nil {
			return err
		}
	}
	switch h.Typeflag {
	case tar.TypeDir:
		if err := r.MkdirAll(name, mode); err != nil {
			return err
		}
		return r.Chmod(name, mode|h.FileInfo().Mode()&(fs.ModeSetuid|fs.ModeSetgid|fs.ModeSticky))
	case tar.TypeReg:
		out, err := r.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL, mode)
		if err != nil {
			return err
		}
		_, err = io.Copy(out, tr)
		if cerr := out.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return err
		}
		return r.Chmod(name, mode)
	case tar.TypeSymlink:
		return r.Symlink(h.Linkname, name)
	case tar.TypeLink:
		return r.Link(strings.TrimPrefix(path.Clean("/"+h.Linkname), "/"), name)
	default:
		// Devices, FIFOs: an image built FROM scratch by COPY has none; say so rather
		// than run a root that lacks them.
		return fmt.Errorf("unsupported tar entry type %q", h.Typeflag)
	}
}

func emptyDir(r *os.Root, dir string) error {
	if dir == "" {
		dir = "."
	}
	d, err := r.Open(dir)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		return err
	}
	names, err := d.Readdirnames(-1)
	d.Close()
	if err != nil {
		return err
	}
	for _, n := range names {
		if err := r.RemoveAll(path.Join(dir, n)); err != nil {
			return err
		}
	}
	return nil
}
