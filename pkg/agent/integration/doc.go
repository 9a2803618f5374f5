// Package integration tests the node agent against a real kube-apiserver
// (test/testenv), with the test playing the kubelet over the plugin's gRPC
// sockets. `go test -short` skips it.
package integration
