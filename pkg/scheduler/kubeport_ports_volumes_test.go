package scheduler_test

import (
	"strconv"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gantry-dev/gantry/pkg/scheduler/scenario"
)

const (
	portsSource = "k8s.io/kubernetes@v1.37.2 pkg/scheduler/framework/plugins/nodeports/node_ports_test.go: TestNodePorts/"
	zoneSource  = "k8s.io/kubernetes@v1.37.2 pkg/scheduler/framework/plugins/volumezone/volume_zone_test.go: "
)

// portsPod is kube's newPod: "PROTO/IP/PORT" host ports.
func portsPod(specs ...string) *kpod {
	p := mkPod()
	for _, s := range specs {
		parts := strings.Split(s, "/")
		port, _ := strconv.Atoi(parts[2])
		p.Port(corev1.Protocol(parts[0]), parts[1], int32(port))
	}
	return p
}

func initPort(sidecar bool) *kpod {
	p := mkPod()
	c := corev1.Container{Name: "init", Ports: []corev1.ContainerPort{{ContainerPort: 8001, HostPort: 8001, Protocol: corev1.ProtocolTCP}}}
	if sidecar {
		always := corev1.ContainerRestartPolicyAlways
		c.RestartPolicy = &always
	}
	p.spec.InitContainers = []corev1.Container{c}
	return p
}

// TestKubeNodePorts ports TestNodePorts: the node holds one pod with the given ports.
func TestKubeNodePorts(t *testing.T) {
	cases := []struct {
		name     string
		pod      *kpod
		existing []string
		fits     bool
	}{
		{"skip filter", mkPod(), nil, true},
		{"other port", portsPod("UDP/127.0.0.1/8080"), []string{"UDP/127.0.0.1/9090"}, true},
		{"same udp port", portsPod("UDP/127.0.0.1/8080"), []string{"UDP/127.0.0.1/8080"}, false},
		{"same tcp port", portsPod("TCP/127.0.0.1/8080"), []string{"TCP/127.0.0.1/8080"}, false},
		{"different host ip", portsPod("TCP/127.0.0.1/8080"), []string{"TCP/127.0.0.2/8080"}, true},
		{"different protocol", portsPod("UDP/127.0.0.1/8080"), []string{"TCP/127.0.0.1/8080"}, true},
		{"second udp port conflict", portsPod("UDP/127.0.0.1/8000", "UDP/127.0.0.1/8080"), []string{"UDP/127.0.0.1/8080"}, false},
		{"first tcp port conflict", portsPod("TCP/127.0.0.1/8001", "UDP/127.0.0.1/8080"), []string{"TCP/127.0.0.1/8001", "UDP/127.0.0.1/8081"}, false},
		{"first tcp port conflict due to 0.0.0.0 hostIP", portsPod("TCP/0.0.0.0/8001"), []string{"TCP/127.0.0.1/8001"}, false},
		{"TCP hostPort conflict due to 0.0.0.0 hostIP", portsPod("TCP/10.0.10.10/8001", "TCP/0.0.0.0/8001"), []string{"TCP/127.0.0.1/8001"}, false},
		{"second tcp port conflict to 0.0.0.0 hostIP", portsPod("TCP/127.0.0.1/8001"), []string{"TCP/0.0.0.0/8001"}, false},
		{"second different protocol", portsPod("UDP/127.0.0.1/8001"), []string{"TCP/0.0.0.0/8001"}, true},
		{"UDP hostPort conflict due to 0.0.0.0 hostIP", portsPod("UDP/127.0.0.1/8001"), []string{"TCP/0.0.0.0/8001", "UDP/0.0.0.0/8001"}, false},
		{"non-sidecar initContainer using hostPort", initPort(false), []string{"TCP/0.0.0.0/8001"}, true},
		{"TCP hostPort conflict from sidecar initContainer", initPort(true), []string{"TCP/0.0.0.0/8001"}, false},
	}
	for _, c := range cases {
		fc := filterCase{name: c.name, pod: c.pod, nodes: []scenario.Node{knode("node1", nil)}}
		if c.existing != nil {
			fc.pods = []*kpod{portsPod(c.existing...).Node("node1")}
		}
		if c.fits {
			fc.fits = []string{"node1"}
		}
		t.Run(c.name, func(t *testing.T) { fc.run(t, portsSource+c.name) })
	}
}

// zoneStorage is the volumes and claims of kube's volumezone tests; each volume
// names its claim (claimRef), which Gantry requires of a bound claim.
func zoneStorage(volumes map[string]map[string]string) *scenario.Storage {
	s := &scenario.Storage{}
	for name, labels := range volumes {
		claim := "PVC_" + strings.TrimPrefix(name, "Vol_")
		s.Volumes = append(s.Volumes, &corev1.PersistentVolume{
			ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels},
			Spec:       corev1.PersistentVolumeSpec{ClaimRef: &corev1.ObjectReference{Namespace: "default", Name: claim}},
		})
		s.Claims = append(s.Claims, &corev1.PersistentVolumeClaim{
			ObjectMeta: metav1.ObjectMeta{Name: claim, Namespace: "default"},
			Spec:       corev1.PersistentVolumeClaimSpec{VolumeName: name},
		})
	}
	return s
}

func claimPod(s *scenario.Storage, claim string) *kpod {
	return mkPod().Volume(corev1.Volume{Name: "v", VolumeSource: corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: claim}}}, s)
}

type zoneCase struct {
	name   string
	claim  string
	labels map[string]string
	fits   bool
}

func runZoneCases(t *testing.T, test string, s *scenario.Storage, cases []zoneCase) {
	for _, c := range cases {
		fc := filterCase{name: c.name, pod: claimPod(s, c.claim), nodes: []scenario.Node{knode("host1", c.labels)}}
		if c.claim == "" {
			fc.pod = mkPod()
		}
		if c.fits {
			fc.fits = []string{"host1"}
		}
		t.Run(c.name, func(t *testing.T) { fc.run(t, zoneSource+test+"/"+c.name) })
	}
}

const (
	betaZone, betaRegion = corev1.LabelFailureDomainBetaZone, corev1.LabelFailureDomainBetaRegion
	gaZone, gaRegion     = corev1.LabelTopologyZone, corev1.LabelTopologyRegion
)

// TestKubeVolumeSingleZone ports TestSingleZone.
func TestKubeVolumeSingleZone(t *testing.T) {
	s := zoneStorage(map[string]map[string]string{
		"Vol_1":        {betaZone: "us-west1-a"},
		"Vol_2":        {betaRegion: "us-west1", "uselessLabel": "none"},
		"Vol_3":        {betaRegion: "us-west1"},
		"Vol_Stable_1": {gaZone: "us-west1-a"},
		"Vol_Stable_2": {gaRegion: "us-west1", "uselessLabel": "none"},
		"Vol_Stable_3": {gaZone: "us-west1-a", gaRegion: "us-west1-a"},
	})
	runZoneCases(t, "TestSingleZone", s, []zoneCase{
		{"pod without volume", "", map[string]string{betaZone: "us-west1-a"}, true},
		{"node without labels", "PVC_1", nil, true},
		{"beta zone label matched", "PVC_1", map[string]string{betaZone: "us-west1-a", "uselessLabel": "none"}, true},
		{"beta region label matched", "PVC_2", map[string]string{betaRegion: "us-west1", "uselessLabel": "none"}, true},
		{"beta region label doesn't match", "PVC_2", map[string]string{betaRegion: "no_us-west1", "uselessLabel": "none"}, false},
		{"beta zone label doesn't match", "PVC_1", map[string]string{betaZone: "no_us-west1-a", "uselessLabel": "none"}, false},
		{"zone label matched", "PVC_Stable_1", map[string]string{gaZone: "us-west1-a", "uselessLabel": "none"}, true},
		{"region label matched", "PVC_Stable_2", map[string]string{gaRegion: "us-west1", "uselessLabel": "none"}, true},
		{"region label doesn't match", "PVC_Stable_2", map[string]string{gaRegion: "no_us-west1", "uselessLabel": "none"}, false},
		{"zone label doesn't match", "PVC_Stable_1", map[string]string{gaZone: "no_us-west1-a", "uselessLabel": "none"}, false},
		{"pv with zone and region, node with only zone", "PVC_Stable_3", map[string]string{gaZone: "us-west1-a"}, false},
		{"pv with zone,node with beta zone", "PVC_Stable_1", map[string]string{betaZone: "us-west1-a"}, false},
		{"pv with beta label,node with ga label, matched", "PVC_1", map[string]string{gaZone: "us-west1-a"}, true},
		{"pv with beta label,node with ga label, don't match", "PVC_1", map[string]string{gaZone: "us-west1-b"}, false},
	})
}

// TestKubeVolumeMultiZone ports TestMultiZone.
func TestKubeVolumeMultiZone(t *testing.T) {
	s := zoneStorage(map[string]map[string]string{
		"Vol_1":        {betaZone: "us-west1-a"},
		"Vol_2":        {betaZone: "us-west1-b", "uselessLabel": "none"},
		"Vol_3":        {betaZone: "us-west1-c__us-west1-a"},
		"Vol_Stable_1": {gaZone: "us-west1-a"},
		"Vol_Stable_2": {gaZone: "us-west1-c__us-west1-a"},
	})
	runZoneCases(t, "TestMultiZone", s, []zoneCase{
		{"node without labels", "PVC_3", nil, true},
		{"beta zone label matched", "PVC_3", map[string]string{betaZone: "us-west1-a", "uselessLabel": "none"}, true},
		{"beta zone label doesn't match", "PVC_1", map[string]string{betaZone: "us-west1-b", "uselessLabel": "none"}, false},
		{"zone label matched", "PVC_Stable_2", map[string]string{gaZone: "us-west1-a", "uselessLabel": "none"}, true},
		{"zone label doesn't match", "PVC_Stable_1", map[string]string{gaZone: "us-west1-b", "uselessLabel": "none"}, false},
	})
}
