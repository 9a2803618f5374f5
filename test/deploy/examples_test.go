package deploy

import (
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	rayv1 "github.com/ray-project/kuberay/ray-operator/apis/ray/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"

	"github.com/gantry-dev/gantry/pkg/apis/scheduling/convert"
	schedulingv1alpha1 "github.com/gantry-dev/gantry/pkg/apis/scheduling/v1alpha1"
	"github.com/gantry-dev/gantry/pkg/fairshare"
)

// exampleScheme knows every kind an example may hold.
func exampleScheme(t testing.TB) *runtime.Scheme {
	t.Helper()
	s := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{clientgoscheme.AddToScheme, rayv1.AddToScheme, schedulingv1alpha1.AddToScheme} {
		if err := add(s); err != nil {
			t.Fatal(err)
		}
	}
	return s
}

type exampleObject struct {
	file string // relative to the repository
	raw  []byte
	obj  runtime.Object
}

// exampleObjects decodes every document of every YAML file under examples/ strictly:
// an unknown kind, an unknown or misspelt field, or a duplicate field fails the test.
func exampleObjects(t *testing.T) map[string][]exampleObject {
	t.Helper()
	decoder := serializer.NewCodecFactory(exampleScheme(t), serializer.EnableStrict).UniversalDeserializer()
	root := repoPath(t, "examples")
	byDir := map[string][]exampleObject{}
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || (!strings.HasSuffix(path, ".yaml") && !strings.HasSuffix(path, ".yml")) {
			return err
		}
		rel, _ := filepath.Rel(repoRoot(t), path)
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		docs, err := splitYAML(data)
		if err != nil {
			t.Errorf("%s: %v", rel, err)
			return nil
		}
		if len(docs) == 0 {
			t.Errorf("%s holds no object", rel)
		}
		for i, doc := range docs {
			obj, gvk, err := decoder.Decode(doc, nil, nil)
			if err != nil {
				t.Errorf("%s, document %d: %v", rel, i+1, err)
				continue
			}
			if gvk.Kind == "Queue" && gvk.Group != schedulingv1alpha1.GroupName {
				t.Errorf("%s, document %d: Queue of %s; Gantry's Queue is %s", rel, i+1, gvk.GroupVersion(), schedulingv1alpha1.SchemeGroupVersion)
			}
			byDir[filepath.Dir(rel)] = append(byDir[filepath.Dir(rel)], exampleObject{file: rel, raw: doc, obj: obj})
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return byDir
}

func TestExamplesDecodeStrictly(t *testing.T) {
	byDir := exampleObjects(t)
	for _, dir := range []string{"examples/seed", "examples/gpu-share-ray", "examples/gpu-model-selector", "examples/two-team-queues"} {
		if len(byDir[dir]) == 0 {
			t.Errorf("%s holds no example objects", dir)
		}
		if _, err := os.Stat(filepath.Join(repoPath(t, dir), "README.md")); err != nil {
			t.Errorf("%s has no README walkthrough", dir)
		}
	}
	// Each example's queues form a valid tree on their own: parents exist, no cycles,
	// quotas and limits -1 or at least 0, limits not below quotas.
	for dir, objs := range byDir {
		var queues []schedulingv1alpha1.Queue
		for _, o := range objs {
			if q, ok := o.obj.(*schedulingv1alpha1.Queue); ok {
				queues = append(queues, *q)
			}
		}
		if len(queues) == 0 {
			continue
		}
		if err := fairshare.Validate(convert.Queues(queues)); err != nil {
			t.Errorf("%s: %v", dir, err)
		}
	}
}
