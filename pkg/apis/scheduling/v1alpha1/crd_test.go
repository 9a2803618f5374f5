package v1alpha1_test

// These tests run the generated CRDs through the apiserver's own CRD validation,
// defaulting, pruning, OpenAPI and CEL code, so that what kubectl apply would reject
// is checked without a cluster.

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"k8s.io/apiextensions-apiserver/pkg/apis/apiextensions"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	crdvalidation "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/validation"
	structuralschema "k8s.io/apiextensions-apiserver/pkg/apiserver/schema"
	"k8s.io/apiextensions-apiserver/pkg/apiserver/schema/cel"
	structuraldefaulting "k8s.io/apiextensions-apiserver/pkg/apiserver/schema/defaulting"
	structuralpruning "k8s.io/apiextensions-apiserver/pkg/apiserver/schema/pruning"
	apiservervalidation "k8s.io/apiextensions-apiserver/pkg/apiserver/validation"
	utiljson "k8s.io/apimachinery/pkg/util/json"
	"k8s.io/apimachinery/pkg/util/validation/field"
	celconfig "k8s.io/apiserver/pkg/apis/cel"
	"sigs.k8s.io/yaml"
)

const crdDir = "../../../../deploy/crds"

// crdSchema is one generated CRD, ready to validate objects the way the apiserver does.
type crdSchema struct {
	structural *structuralschema.Structural
	openAPI    apiservervalidation.SchemaValidator
	cel        *cel.Validator
}

func loadCRD(t *testing.T, file string) *crdSchema {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(crdDir, file))
	if err != nil {
		t.Fatalf("read CRD (run controller-gen first): %v", err)
	}
	var v1crd apiextensionsv1.CustomResourceDefinition
	if err := yaml.UnmarshalStrict(data, &v1crd); err != nil {
		t.Fatalf("parse %s: %v", file, err)
	}
	// Defaults the apiserver sets on a CRD before validating it.
	apiextensionsv1.SetObjectDefaults_CustomResourceDefinition(&v1crd)
	var crd apiextensions.CustomResourceDefinition
	if err := apiextensionsv1.Convert_v1_CustomResourceDefinition_To_apiextensions_CustomResourceDefinition(&v1crd, &crd, nil); err != nil {
		t.Fatalf("convert %s: %v", file, err)
	}
	if errs := crdvalidation.ValidateCustomResourceDefinition(context.Background(), &crd); len(errs) > 0 {
		t.Fatalf("the apiserver would reject %s: %v", file, errs.ToAggregate())
	}
	if len(crd.Spec.Versions) != 1 {
		t.Fatalf("%s: want one version, got %d", file, len(crd.Spec.Versions))
	}
	// The internal version keeps a schema shared by all versions at the top.
	validation := crd.Spec.Validation
	if crd.Spec.Versions[0].Schema != nil {
		validation = crd.Spec.Versions[0].Schema
	}
	props := validation.OpenAPIV3Schema
	structural, err := structuralschema.NewStructural(props)
	if err != nil {
		t.Fatalf("%s: structural schema: %v", file, err)
	}
	openAPI, _, err := apiservervalidation.NewSchemaValidator(props)
	if err != nil {
		t.Fatalf("%s: schema validator: %v", file, err)
	}
	return &crdSchema{
		structural: structural,
		openAPI:    openAPI,
		cel:        cel.NewValidator(structural, true, celconfig.PerCallLimit),
	}
}

// admit defaults, prunes and validates obj as the apiserver would on create. It returns
// the unknown fields it pruned and the validation errors.
func (c *crdSchema) admit(t *testing.T, manifest string) (pruned []string, errs field.ErrorList) {
	t.Helper()
	// Decode as the apiserver does: whole numbers become int64, others float64.
	jsonData, err := yaml.YAMLToJSON([]byte(manifest))
	if err != nil {
		t.Fatalf("parse object: %v", err)
	}
	var obj map[string]any
	if err := utiljson.Unmarshal(jsonData, &obj); err != nil {
		t.Fatalf("parse object: %v", err)
	}
	structuraldefaulting.Default(obj, c.structural)
	pruned = structuralpruning.PruneWithOptions(obj, c.structural, true, structuralschema.UnknownFieldPathOptions{TrackUnknownFieldPaths: true})
	errs = append(errs, apiservervalidation.ValidateCustomResource(nil, obj, c.openAPI)...)
	celErrs, _ := c.cel.Validate(context.Background(), nil, c.structural, obj, nil, celconfig.RuntimeCELCostBudget)
	return pruned, append(errs, celErrs...)
}

func TestSeedQueuesApplyWithOnlyTheAPIVersionChanged(t *testing.T) {
	crd := loadCRD(t, "scheduling.gantry.dev_queues.yaml")
	data, err := os.ReadFile("testdata/seed-queues.yaml")
	if err != nil {
		t.Fatal(err)
	}
	for _, doc := range bytes.Split(data, []byte("\n---")) {
		pruned, errs := crd.admit(t, string(doc))
		if len(pruned) > 0 {
			t.Errorf("fields of the seed queue would be dropped: %v", pruned)
		}
		if len(errs) > 0 {
			t.Errorf("seed queue rejected: %v", errs.ToAggregate())
		}
	}
}

func TestQueueSchemaRejectsBadInputWithAMessageThatSaysWhatToChange(t *testing.T) {
	crd := loadCRD(t, "scheduling.gantry.dev_queues.yaml")
	queue := func(name, spec string) string {
		return "apiVersion: scheduling.gantry.dev/v1alpha1\nkind: Queue\nmetadata: {name: " + name + "}\nspec:\n" + spec
	}
	tests := []struct {
		name     string
		manifest string
		// wantErr is a substring of the error, empty when the object is valid.
		wantErr string
	}{
		{
			name:     "quota and weight only: limit defaults to -1",
			manifest: queue("team-a", "  resources:\n    gpu: {quota: 4}\n"),
		},
		{
			name:     "limit equal to quota, fractional GPUs",
			manifest: queue("team-a", "  resources:\n    gpu: {quota: 0.5, limit: 0.5}\n"),
		},
		{
			name:     "per-model quotas",
			manifest: queue("team-a", "  resources:\n    gpuModels:\n    - {model: NVIDIA H100 80GB HBM3, quota: 2, limit: 4}\n    - {model: NVIDIA A10G, quota: -1}\n"),
		},
		{
			name:     "negative quota other than -1",
			manifest: queue("team-a", "  resources:\n    gpu: {quota: -2}\n"),
			wantErr:  "spec.resources.gpu: Invalid value: quota must be -1 (unlimited), 0 (nothing guaranteed) or a positive amount: change quota",
		},
		{
			name:     "negative limit other than -1",
			manifest: queue("team-a", "  resources:\n    memory: {quota: 0, limit: -3}\n"),
			wantErr:  "spec.resources.memory: Invalid value: limit must be -1 (no limit), 0 or a positive amount: change limit",
		},
		{
			name:     "limit below quota",
			manifest: queue("team-a", "  resources:\n    cpu: {quota: 4000, limit: 2000}\n"),
			wantErr:  "spec.resources.cpu: Invalid value: limit is below quota: raise limit to at least quota, lower quota, or set limit to -1 (no limit)",
		},
		{
			// As KAI writes it (its own fixtures pair these for cpu and memory): all its
			// demand, capped by the limit.
			name:     "unlimited quota with a finite limit, as KAI accepts it",
			manifest: queue("team-a", "  resources:\n    gpu: {quota: -1, limit: 8}\n    cpu: {quota: -1, limit: 4000}\n    memory: {quota: -1, limit: 8000}\n"),
		},
		{
			name:     "per-model limit below quota",
			manifest: queue("team-a", "  resources:\n    gpuModels:\n    - {model: NVIDIA H100 80GB HBM3, quota: 4, limit: 2}\n"),
			wantErr:  "spec.resources.gpuModels[0]: Invalid value: limit is below quota",
		},
		{
			name:     "negative overQuotaWeight",
			manifest: queue("team-a", "  resources:\n    gpu: {overQuotaWeight: -1}\n"),
			wantErr:  "overQuotaWeight must be 0 (no share of spare capacity) or more",
		},
		{
			name:     "a queue naming itself as parent",
			manifest: queue("team-a", "  parentQueue: team-a\n"),
			wantErr:  "queue team-a names itself in spec.parentQueue: remove spec.parentQueue or set it to another queue",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, errs := crd.admit(t, tt.manifest)
			if tt.wantErr == "" {
				if len(errs) > 0 {
					t.Fatalf("rejected: %v", errs.ToAggregate())
				}
				return
			}
			if len(errs) == 0 {
				t.Fatalf("accepted, want an error containing %q", tt.wantErr)
			}
			if got := errs.ToAggregate().Error(); !strings.Contains(got, tt.wantErr) {
				t.Errorf("error = %s\nwant it to contain %q", got, tt.wantErr)
			}
		})
	}
}

func TestPodGroupSchema(t *testing.T) {
	crd := loadCRD(t, "scheduling.gantry.dev_podgroups.yaml")
	podGroup := func(spec string) string {
		return "apiVersion: scheduling.gantry.dev/v1alpha1\nkind: PodGroup\nmetadata: {name: job, namespace: ml}\nspec:\n" + spec
	}
	tests := []struct {
		name     string
		manifest string
		wantErr  string
	}{
		{name: "minimal", manifest: podGroup("  queue: team-a\n")},
		{
			name:     "sub-groups within minMember",
			manifest: podGroup("  minMember: 5\n  subGroups:\n  - {name: leader, minMember: 1}\n  - {name: workers, minMember: 4}\n"),
		},
		{
			name:     "sub-groups above minMember",
			manifest: podGroup("  minMember: 3\n  subGroups:\n  - {name: leader, minMember: 1}\n  - {name: workers, minMember: 4}\n"),
			wantErr:  "spec: Invalid value: the sub-groups' minMember values add up to more than minMember",
		},
		{name: "minMember 0", manifest: podGroup("  minMember: 0\n"), wantErr: "spec.minMember"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, errs := crd.admit(t, tt.manifest)
			if tt.wantErr == "" {
				if len(errs) > 0 {
					t.Fatalf("rejected: %v", errs.ToAggregate())
				}
				return
			}
			if len(errs) == 0 {
				t.Fatalf("accepted, want an error containing %q", tt.wantErr)
			}
			if got := errs.ToAggregate().Error(); !strings.Contains(got, tt.wantErr) {
				t.Errorf("error = %s\nwant it to contain %q", got, tt.wantErr)
			}
		})
	}
}
