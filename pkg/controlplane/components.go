package controlplane

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

func ioMulti(w ...io.Writer) io.Writer { return io.MultiWriter(w...) }

func (e *Env) startEtcd(ctx context.Context, bin string, logs bool) (string, error) {
	clientPort, err := FreePort()
	if err != nil {
		return "", err
	}
	peerPort, err := FreePort()
	if err != nil {
		return "", err
	}
	clientURL := fmt.Sprintf("http://127.0.0.1:%d", clientPort)
	peerURL := fmt.Sprintf("http://127.0.0.1:%d", peerPort)
	p, err := e.run("etcd", logs, filepath.Join(bin, "etcd"),
		"--name=testenv",
		"--data-dir="+filepath.Join(e.Dir, "etcd"),
		"--listen-client-urls="+clientURL,
		"--advertise-client-urls="+clientURL,
		"--listen-peer-urls="+peerURL,
		"--initial-advertise-peer-urls="+peerURL,
		"--initial-cluster=testenv="+peerURL,
		"--unsafe-no-fsync",
		"--quota-backend-bytes=8589934592",
		"--log-level=warn",
	)
	if err != nil {
		return "", err
	}
	err = e.waitFor(ctx, p, 30*time.Second, "etcd", func() error {
		resp, err := http.Get(clientURL + "/health")
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("health: %s", resp.Status)
		}
		return nil
	})
	return clientURL, err
}

func (e *Env) startAPIServer(ctx context.Context, bin, etcdURL string, pki *pki, logs, aggregatorRouting bool) error {
	port, err := FreePort()
	if err != nil {
		return err
	}
	e.APIServerURL = fmt.Sprintf("https://127.0.0.1:%d", port)
	args := []string{
		"--etcd-servers=" + etcdURL,
		"--bind-address=127.0.0.1",
		"--secure-port=" + strconv.Itoa(port),
		// A loopback advertise address is refused unless the endpoint reconciler is off.
		"--advertise-address=10.0.0.1",
		"--endpoint-reconciler-type=none",
		"--service-cluster-ip-range=10.0.0.0/16",
		"--cert-dir=" + filepath.Join(e.Dir, "apiserver-certs"),
		"--tls-cert-file=" + pki.serverCert,
		"--tls-private-key-file=" + pki.serverKey,
		"--client-ca-file=" + pki.caCert,
		"--service-account-key-file=" + pki.saPub,
		"--service-account-signing-key-file=" + pki.saKey,
		"--service-account-issuer=https://kubernetes.default.svc",
		"--authorization-mode=Node,RBAC",
		"--allow-privileged=true",
		// Benchmarks push thousands of requests a second through one client.
		"--max-requests-inflight=4000",
		"--max-mutating-requests-inflight=2000",
		"--enable-priority-and-fairness=false",
		"--profiling=false",
		"--v=0",
		"--enable-aggregator-routing=" + strconv.FormatBool(aggregatorRouting),
	}
	p, err := e.run("kube-apiserver", logs, filepath.Join(bin, "kube-apiserver"), args...)
	if err != nil {
		return err
	}
	cfg := &rest.Config{
		Host: e.APIServerURL,
		TLSClientConfig: rest.TLSClientConfig{
			CAFile:   pki.caCert,
			CertFile: pki.adminCert,
			KeyFile:  pki.adminKey,
		},
		QPS:   1000,
		Burst: 2000,
	}
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	err = e.waitFor(ctx, p, 90*time.Second, "kube-apiserver", func() error {
		ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		body, err := client.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(ctx)
		if err != nil {
			return fmt.Errorf("%v: %s", err, body)
		}
		return nil
	})
	if err != nil {
		return err
	}
	e.Config, e.Client = cfg, client
	e.Kubeconfig = filepath.Join(e.Dir, "kubeconfig")
	return WriteKubeconfig(cfg, e.Kubeconfig)
}

// WriteKubeconfig writes cfg (certificate files by path) as a kubeconfig file.
func WriteKubeconfig(cfg *rest.Config, path string) error {
	kc := clientcmdapi.NewConfig()
	kc.Clusters["testenv"] = &clientcmdapi.Cluster{Server: cfg.Host, CertificateAuthority: cfg.CAFile}
	kc.AuthInfos["admin"] = &clientcmdapi.AuthInfo{ClientCertificate: cfg.CertFile, ClientKey: cfg.KeyFile}
	kc.Contexts["testenv"] = &clientcmdapi.Context{Cluster: "testenv", AuthInfo: "admin"}
	kc.CurrentContext = "testenv"
	if err := clientcmd.WriteToFile(*kc, path); err != nil {
		return fmt.Errorf("controlplane: write kubeconfig: %w", err)
	}
	return nil
}

func (e *Env) startControllerManager(ctx context.Context, bin string, pki *pki, logs bool) error {
	port, err := FreePort()
	if err != nil {
		return err
	}
	p, err := e.run("kube-controller-manager", logs, filepath.Join(bin, "kube-controller-manager"),
		"--kubeconfig="+e.Kubeconfig,
		"--authentication-kubeconfig="+e.Kubeconfig,
		"--authorization-kubeconfig="+e.Kubeconfig,
		"--bind-address=127.0.0.1",
		"--secure-port="+strconv.Itoa(port),
		"--cert-dir="+filepath.Join(e.Dir, "kcm-certs"),
		"--leader-elect=false",
		"--use-service-account-credentials=false",
		"--service-account-private-key-file="+pki.saKey,
		"--root-ca-file="+pki.caCert,
		"--cluster-signing-cert-file="+pki.caCert,
		"--cluster-signing-key-file="+pki.caKey,
		"--controllers=*",
		"--kube-api-qps=1000",
		"--kube-api-burst=2000",
		"--v=0",
	)
	if err != nil {
		return err
	}
	return e.waitFor(ctx, p, 60*time.Second, "kube-controller-manager", func() error {
		resp, err := insecureGet(fmt.Sprintf("https://127.0.0.1:%d/healthz", port))
		if err != nil {
			return err
		}
		if resp != http.StatusOK {
			return fmt.Errorf("healthz: %d", resp)
		}
		return nil
	})
}

func (e *Env) startKwok(ctx context.Context, bin string, logs bool) error {
	stages := filepath.Join(bin, "kwok-stages.yaml")
	if _, err := os.Stat(stages); err != nil {
		return fmt.Errorf("controlplane: %s missing: run `make tools`", stages)
	}
	port, err := FreePort()
	if err != nil {
		return err
	}
	p, err := e.run("kwok", logs, filepath.Join(bin, "kwok"),
		"--kubeconfig="+e.Kubeconfig,
		"--config="+stages,
		"--manage-all-nodes=false",
		"--manage-nodes-with-label-selector="+KwokNodeLabel+"="+KwokNodeLabelValue,
		"--node-lease-duration-seconds=40",
		"--cidr=10.128.0.1/16",
		"--node-ip=10.0.0.2",
		"--server-address=127.0.0.1:"+strconv.Itoa(port),
	)
	if err != nil {
		return err
	}
	return e.waitFor(ctx, p, 30*time.Second, "kwok", func() error {
		resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/healthz", port))
		if err != nil {
			return err
		}
		resp.Body.Close()
		return nil
	})
}

func (e *Env) startKubeRay(ctx context.Context, bin string, opts Options) error {
	metrics, err := FreePort()
	if err != nil {
		return err
	}
	probe, err := FreePort()
	if err != nil {
		return err
	}
	args := []string{
		"--kubeconfig=" + e.Kubeconfig,
		"--metrics-addr=127.0.0.1:" + strconv.Itoa(metrics),
		"--health-probe-bind-address=127.0.0.1:" + strconv.Itoa(probe),
		"--enable-leader-election=false",
	}
	if opts.KubeRayArgs != nil {
		args = append(args, opts.KubeRayArgs...)
	} else {
		args = append(args, "--batch-scheduler=kai-scheduler")
	}
	p, err := e.run("kuberay-operator", opts.Logs, filepath.Join(bin, "kuberay-operator"), args...)
	if err != nil {
		return err
	}
	return e.waitFor(ctx, p, 60*time.Second, "kuberay-operator", func() error {
		resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/readyz", probe))
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("readyz: %s", resp.Status)
		}
		return nil
	})
}
