package oracle

import (
	"context"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"
	configv1 "k8s.io/kube-scheduler/config/v1"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/apis/config"
	"k8s.io/kubernetes/pkg/scheduler/apis/config/scheme"
	kubecache "k8s.io/kubernetes/pkg/scheduler/backend/cache"
	"k8s.io/kubernetes/pkg/scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework/plugins/defaultbinder"
	plfeature "k8s.io/kubernetes/pkg/scheduler/framework/plugins/feature"
	"k8s.io/kubernetes/pkg/scheduler/framework/plugins/interpodaffinity"
	"k8s.io/kubernetes/pkg/scheduler/framework/plugins/nodeaffinity"
	"k8s.io/kubernetes/pkg/scheduler/framework/plugins/nodename"
	"k8s.io/kubernetes/pkg/scheduler/framework/plugins/nodeports"
	"k8s.io/kubernetes/pkg/scheduler/framework/plugins/noderesources"
	"k8s.io/kubernetes/pkg/scheduler/framework/plugins/nodeunschedulable"
	"k8s.io/kubernetes/pkg/scheduler/framework/plugins/nodevolumelimits"
	"k8s.io/kubernetes/pkg/scheduler/framework/plugins/podtopologyspread"
	"k8s.io/kubernetes/pkg/scheduler/framework/plugins/queuesort"
	"k8s.io/kubernetes/pkg/scheduler/framework/plugins/tainttoleration"
	"k8s.io/kubernetes/pkg/scheduler/framework/plugins/volumebinding"
	"k8s.io/kubernetes/pkg/scheduler/framework/plugins/volumerestrictions"
	"k8s.io/kubernetes/pkg/scheduler/framework/plugins/volumezone"
	frameworkruntime "k8s.io/kubernetes/pkg/scheduler/framework/runtime"
	"k8s.io/kubernetes/pkg/scheduler/metrics"
)

// filterPlugins are kube-scheduler's default Filter plugins that judge what the
// random worlds exercise, in the default profile's order. (DynamicResources,
// NodeDeclaredFeatures and SchedulingGates have nothing to judge here.)
var filterPlugins = []string{
	nodeunschedulable.Name, nodename.Name, tainttoleration.Name, nodeaffinity.Name, nodeports.Name,
	noderesources.Name, volumerestrictions.Name, nodevolumelimits.CSIName, volumebinding.Name, volumezone.Name,
	podtopologyspread.Name, interpodaffinity.Name,
}

// kube is kube-scheduler v1.37's filter chain over one world: its own plugins,
// built by its own framework with the default profile's arguments, over a fake
// clientset's informers for the storage objects and a snapshot of nodes and bound
// pods that the oracle swaps as pods are placed.
type kube struct {
	ctx    context.Context
	fw     framework.Framework
	lister *swapLister
	nodes  []*corev1.Node
}

// swapLister is the framework's snapshot; the plugins keep the lister they were
// given, so the snapshot behind it is swapped in place.
type swapLister struct{ *kubecache.Snapshot }

func newKube(ctx context.Context, w *world) (*kube, error) {
	// The framework counts plugin calls in kube-scheduler's metrics.
	metrics.Register()
	var objs []runtime.Object
	for _, o := range w.nodes {
		objs = append(objs, o)
	}
	for _, o := range w.namespaces {
		objs = append(objs, o)
	}
	for _, o := range w.classes {
		objs = append(objs, o)
	}
	for _, o := range w.pvs {
		objs = append(objs, o)
	}
	for _, o := range w.pvcs {
		objs = append(objs, o)
	}
	for _, o := range w.csiNodes {
		objs = append(objs, o)
	}
	client := fake.NewClientset(objs...)
	factory := informers.NewSharedInformerFactory(client, 0)
	profile, err := filterProfile()
	if err != nil {
		return nil, err
	}
	lister := &swapLister{Snapshot: kubecache.NewEmptySnapshot()}
	fw, err := frameworkruntime.NewFramework(ctx, registry(), profile,
		frameworkruntime.WithClientSet(client),
		frameworkruntime.WithInformerFactory(factory),
		frameworkruntime.WithSnapshotSharedLister(lister),
		frameworkruntime.WithSharedCSIManager(nodevolumelimits.NewCSIManager(factory.Storage().V1().CSINodes().Lister())),
	)
	if err != nil {
		return nil, fmt.Errorf("kube-scheduler framework: %w", err)
	}
	factory.Start(ctx.Done())
	factory.WaitForCacheSync(ctx.Done())
	return &kube{ctx: ctx, fw: fw, lister: lister, nodes: w.nodes}, nil
}

// registry is the in-tree registry (plugins/registry.go) cut down to filterPlugins,
// with the features of the default feature gates.
func registry() frameworkruntime.Registry {
	fts := plfeature.NewSchedulerFeaturesFromGates(utilfeature.DefaultFeatureGate)
	return frameworkruntime.Registry{
		nodeunschedulable.Name:   frameworkruntime.FactoryAdapter(fts, nodeunschedulable.New),
		nodename.Name:            frameworkruntime.FactoryAdapter(fts, nodename.New),
		tainttoleration.Name:     frameworkruntime.FactoryAdapter(fts, tainttoleration.New),
		nodeaffinity.Name:        frameworkruntime.FactoryAdapter(fts, nodeaffinity.New),
		nodeports.Name:           frameworkruntime.FactoryAdapter(fts, nodeports.New),
		noderesources.Name:       frameworkruntime.FactoryAdapter(fts, noderesources.NewFit),
		volumerestrictions.Name:  frameworkruntime.FactoryAdapter(fts, volumerestrictions.New),
		nodevolumelimits.CSIName: frameworkruntime.FactoryAdapter(fts, nodevolumelimits.NewCSI),
		volumebinding.Name:       frameworkruntime.FactoryAdapter(fts, volumebinding.New),
		volumezone.Name:          frameworkruntime.FactoryAdapter(fts, volumezone.New),
		podtopologyspread.Name:   frameworkruntime.FactoryAdapter(fts, podtopologyspread.New),
		interpodaffinity.Name:    frameworkruntime.FactoryAdapter(fts, interpodaffinity.New),
		// A framework needs a queue sort and a bind plugin to be built.
		queuesort.Name:     queuesort.New,
		defaultbinder.Name: defaultbinder.New,
	}
}

// filterProfile enables filterPlugins at PreFilter and Filter with the arguments
// kube-scheduler's v1 defaulting gives the default profile.
func filterProfile() (*config.KubeSchedulerProfile, error) {
	v1cfg := &configv1.KubeSchedulerConfiguration{}
	scheme.Scheme.Default(v1cfg)
	cfg := &config.KubeSchedulerConfiguration{}
	if err := scheme.Scheme.Convert(v1cfg, cfg, nil); err != nil {
		return nil, fmt.Errorf("default kube-scheduler configuration: %w", err)
	}
	def := cfg.Profiles[0]
	profile := &config.KubeSchedulerProfile{SchedulerName: "oracle", Plugins: &config.Plugins{
		QueueSort: config.PluginSet{Enabled: []config.Plugin{{Name: queuesort.Name}}},
		Bind:      config.PluginSet{Enabled: []config.Plugin{{Name: defaultbinder.Name}}},
	}}
	wanted := map[string]bool{}
	for _, name := range filterPlugins {
		wanted[name] = true
		profile.Plugins.PreFilter.Enabled = append(profile.Plugins.PreFilter.Enabled, config.Plugin{Name: name})
		profile.Plugins.Filter.Enabled = append(profile.Plugins.Filter.Enabled, config.Plugin{Name: name})
	}
	for _, pc := range def.PluginConfig {
		if wanted[pc.Name] {
			profile.PluginConfig = append(profile.PluginConfig, pc)
		}
	}
	return profile, nil
}

// feasible returns the nodes that pass every filter for pod, with bound on their
// nodes, and, for the others, why (plugin: reason).
func (k *kube) feasible(pod *corev1.Pod, bound []*corev1.Pod) (fit []string, why map[string]string) {
	k.lister.Snapshot = kubecache.NewSnapshot(bound, k.nodes)
	state := framework.NewCycleState()
	why = map[string]string{}
	res, st, _ := k.fw.RunPreFilterPlugins(k.ctx, state, pod)
	if !st.IsSuccess() {
		for _, n := range k.nodes {
			why[n.Name] = "PreFilter " + st.Plugin() + ": " + strings.Join(st.Reasons(), "; ")
		}
		return nil, why
	}
	infos, err := k.lister.NodeInfos().List()
	if err != nil {
		panic(err)
	}
	for _, ni := range infos {
		name := ni.Node().Name
		if !res.AllNodes() && !res.NodeNames.Has(name) {
			why[name] = "PreFilter result excludes the node"
			continue
		}
		if st := k.fw.RunFilterPlugins(k.ctx, state, pod, ni); !st.IsSuccess() {
			why[name] = st.Plugin() + ": " + strings.Join(st.Reasons(), "; ")
			continue
		}
		fit = append(fit, name)
	}
	return fit, why
}

var _ fwk.SharedLister = &swapLister{}
