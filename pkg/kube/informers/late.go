package informers

import (
	"context"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
)

// lateWatch is a custom resource that was not served when the scheduler started,
// with the handlers its informer gets once it is.
type lateWatch struct {
	gvr            schema.GroupVersionResource
	upsert, remove func(*unstructured.Unstructured)
}

// watchLate asks discovery every Rediscover whether the custom resources missing at
// start are served now (a CRD installed after the scheduler, as KubeRay's may be),
// and starts an informer for each one that is. It returns when all are watched or
// ctx ends.
//
// Discovery rather than a CRD informer: it needs no RBAC on
// customresourcedefinitions, and it answers the question that matters (does the
// API server serve this group, version and resource) whatever installed it.
func (inf *Informers) watchLate(ctx context.Context) {
	every := inf.Rediscover
	if every <= 0 {
		every = DefaultRediscover
	}
	t := time.NewTicker(every)
	defer t.Stop()
	for len(inf.late) > 0 {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		inf.late = inf.startServed(ctx)
	}
}

// startServed starts the informers of the late resources discovery now shows, waits
// for their first list, and returns those still missing.
func (inf *Informers) startServed(ctx context.Context) []lateWatch {
	var gvs []schema.GroupVersion
	seen := map[schema.GroupVersion]bool{}
	for _, l := range inf.late {
		if gv := l.gvr.GroupVersion(); !seen[gv] {
			seen[gv] = true
			gvs = append(gvs, gv)
		}
	}
	served := servedResources(inf.client, gvs...)
	var missing []lateWatch
	var synced []cache.InformerSynced
	for _, l := range inf.late {
		if !served[l.gvr] {
			missing = append(missing, l)
			continue
		}
		reg, err := on(inf.dynamic.ForResource(l.gvr).Informer(), l.upsert, l.remove)
		if err != nil {
			klog.ErrorS(err, "Watch API served late", "resource", l.gvr.String())
			missing = append(missing, l)
			continue
		}
		klog.InfoS("API served now; watching it", "resource", l.gvr.String())
		synced = append(synced, reg.HasSynced)
	}
	if len(synced) > 0 {
		inf.dynamic.Start(ctx.Done()) // starts only the informers not started yet
		cache.WaitForCacheSync(ctx.Done(), synced...)
	}
	return missing
}
