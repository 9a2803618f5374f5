package agent

import (
	"os"
	"testing"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"sigs.k8s.io/yaml"
)

func TestDeviceClassManifestMatchesCode(t *testing.T) {
	data, err := os.ReadFile("../../deploy/manifests/deviceclass.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var fromFile resourceapi.DeviceClass
	if err := yaml.UnmarshalStrict(data, &fromFile); err != nil {
		t.Fatal(err)
	}
	if !equality.Semantic.DeepEqual(&fromFile, DeviceClass()) {
		t.Errorf("deploy/manifests/deviceclass.yaml and DeviceClass() differ:\nfile: %+v\ncode: %+v", fromFile, *DeviceClass())
	}
}
