// Package oracle holds the differential test of Gantry's constraint filters against
// kube-scheduler's own Filter plugins (oracle_test.go). It is a module of its own so
// that the main module never depends on k8s.io/kubernetes.
package oracle
