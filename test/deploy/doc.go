// Package deploy holds the tests of what Gantry ships besides its binaries: the Helm
// chart (deploy/helm/gantry), the Grafana dashboards (deploy/grafana) and the examples
// (examples/). They lint and render the chart with the pinned helm (bin/helm, built by
// `make tools`), check every dashboard query against the metrics Gantry exports, decode
// every example strictly, and install the chart on a real kube-apiserver with kwok nodes.
//
// Nothing outside tests imports this package.
package deploy
