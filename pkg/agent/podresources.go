package agent

import (
	"context"
	"fmt"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	podresourcesv1 "k8s.io/kubelet/pkg/apis/podresources/v1"

	"github.com/gantry-dev/gantry/gpu"
	"github.com/gantry-dev/gantry/pkg/names"
)

// DefaultPodResourcesSocket is the kubelet's PodResources API socket.
const DefaultPodResourcesSocket = "/var/lib/kubelet/pod-resources/kubelet.sock"

// nvidiaGPUResource is the NVIDIA device plugin's resource; its device ids are GPU UUIDs.
const nvidiaGPUResource = "nvidia.com/gpu"

// PodResourcesLister lists which containers hold which devices (the kubelet
// PodResources API).
type PodResourcesLister interface {
	List(ctx context.Context) ([]*podresourcesv1.PodResources, error)
}

type podResourcesClient struct {
	conn   *grpc.ClientConn
	client podresourcesv1.PodResourcesListerClient
}

// NewPodResourcesClient connects to the kubelet's PodResources socket. The
// connection is lazy: a missing socket shows as a List error.
func NewPodResourcesClient(socket string) (PodResourcesLister, func() error, error) {
	conn, err := grpc.NewClient("unix://"+socket, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, nil, fmt.Errorf("connect to kubelet PodResources at %s: %w", socket, err)
	}
	return &podResourcesClient{conn: conn, client: podresourcesv1.NewPodResourcesListerClient(conn)}, conn.Close, nil
}

func (c *podResourcesClient) List(ctx context.Context) ([]*podresourcesv1.PodResources, error) {
	resp, err := c.client.List(ctx, &podresourcesv1.ListPodResourcesRequest{})
	if err != nil {
		return nil, fmt.Errorf("list pod resources: %w", err)
	}
	return resp.GetPodResources(), nil
}

// containerRef is a container holding a GPU.
type containerRef struct {
	Namespace, Pod, Container string
}

// containersByGPU maps GPU UUIDs to the containers holding them, through DRA
// claims of this driver or through the NVIDIA device plugin.
func containersByGPU(pods []*podresourcesv1.PodResources, inv *gpu.Inventory) map[string][]containerRef {
	uuidByDevice := map[string]string{}
	known := map[string]bool{}
	for _, d := range inv.Devices {
		uuidByDevice[DeviceName(d.Index)] = d.UUID
		known[d.UUID] = true
	}
	out := map[string][]containerRef{}
	add := func(uuid string, ref containerRef) {
		for _, r := range out[uuid] {
			if r == ref {
				return
			}
		}
		out[uuid] = append(out[uuid], ref)
	}
	for _, p := range pods {
		for _, c := range p.GetContainers() {
			ref := containerRef{Namespace: p.GetNamespace(), Pod: p.GetName(), Container: c.GetName()}
			for _, dev := range c.GetDevices() {
				if dev.GetResourceName() != nvidiaGPUResource {
					continue
				}
				for _, id := range dev.GetDeviceIds() {
					if known[id] {
						add(id, ref)
					}
				}
			}
			for _, dr := range c.GetDynamicResources() {
				for _, cr := range dr.GetClaimResources() {
					if cr.GetDriverName() != names.DriverName {
						continue
					}
					if uuid, ok := uuidByDevice[cr.GetDeviceName()]; ok {
						add(uuid, ref)
					}
				}
			}
		}
	}
	return out
}
