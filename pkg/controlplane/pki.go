package controlplane

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"time"
)

// pki is the paths of the control plane's certificates and keys.
type pki struct {
	caCert, caKey         string
	serverCert, serverKey string
	adminCert, adminKey   string
	saKey, saPub          string
}

// writePKI makes a throwaway CA, a serving certificate for the API server, a
// cluster-admin client certificate (group system:masters) and the service-account
// signing key.
func writePKI(dir string) (*pki, error) {
	d := filepath.Join(dir, "pki")
	if err := os.MkdirAll(d, 0o700); err != nil {
		return nil, err
	}
	p := &pki{
		caCert: filepath.Join(d, "ca.crt"), caKey: filepath.Join(d, "ca.key"),
		serverCert: filepath.Join(d, "apiserver.crt"), serverKey: filepath.Join(d, "apiserver.key"),
		adminCert: filepath.Join(d, "admin.crt"), adminKey: filepath.Join(d, "admin.key"),
		saKey: filepath.Join(d, "sa.key"), saPub: filepath.Join(d, "sa.pub"),
	}
	now := time.Now()
	ca, caKey, err := writeCA(p, now)
	if err != nil {
		return nil, err
	}
	if err := issueCert(ca, caKey, now, p.serverCert, p.serverKey, 2, &x509.Certificate{
		Subject:     pkix.Name{CommonName: "kube-apiserver"},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1"), net.ParseIP("10.0.0.1")},
		DNSNames:    []string{"localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc"},
	}); err != nil {
		return nil, fmt.Errorf("controlplane: server certificate: %w", err)
	}
	if err := issueCert(ca, caKey, now, p.adminCert, p.adminKey, 3, &x509.Certificate{
		Subject:     pkix.Name{CommonName: "gantry-testenv-admin", Organization: []string{"system:masters"}},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}); err != nil {
		return nil, fmt.Errorf("controlplane: admin certificate: %w", err)
	}
	if err := writeServiceAccountKey(p); err != nil {
		return nil, err
	}
	return p, nil
}

// writeCA makes the control plane's self-signed CA and writes it to p's CA paths.
func writeCA(p *pki, now time.Time) (*x509.Certificate, *ecdsa.PrivateKey, error) {
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	caTmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "gantry-testenv-ca"},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(24 * 365 * time.Hour),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		return nil, nil, err
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		return nil, nil, err
	}
	if err := writeCert(p.caCert, caDER); err != nil {
		return nil, nil, err
	}
	if err := writeKey(p.caKey, caKey); err != nil {
		return nil, nil, err
	}
	return ca, caKey, nil
}

// issueCert signs tmpl with the CA for a year and writes the certificate and a new key.
func issueCert(ca *x509.Certificate, caKey *ecdsa.PrivateKey, now time.Time, certPath, keyPath string, serial int64, tmpl *x509.Certificate) error {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	tmpl.SerialNumber = big.NewInt(serial)
	tmpl.NotBefore = now.Add(-time.Hour)
	tmpl.NotAfter = now.Add(24 * 365 * time.Hour)
	tmpl.KeyUsage = x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		return err
	}
	if err := writeCert(certPath, der); err != nil {
		return err
	}
	return writeKey(keyPath, key)
}

// writeServiceAccountKey writes the key pair that signs service account tokens.
func writeServiceAccountKey(p *pki) error {
	saKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	if err := writeKey(p.saKey, saKey); err != nil {
		return err
	}
	pub, err := x509.MarshalPKIXPublicKey(&saKey.PublicKey)
	if err != nil {
		return err
	}
	return os.WriteFile(p.saPub, pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pub}), 0o600)
}

func writeCert(path string, der []byte) error {
	return os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600)
}

func writeKey(path string, key *ecdsa.PrivateKey) error {
	der, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return err
	}
	return os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: der}), 0o600)
}

// insecureGet fetches a health endpoint of a component that serves a self-signed
// certificate, returning the status code.
func insecureGet(url string) (int, error) {
	c := &http.Client{
		Timeout:   2 * time.Second,
		Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}, //nolint:gosec // loopback health probe
	}
	resp, err := c.Get(url)
	if err != nil {
		return 0, err
	}
	resp.Body.Close()
	return resp.StatusCode, nil
}

// ServingCert issues a serving certificate for 127.0.0.1 from the control plane's CA
// into dir (tls.crt, tls.key) and returns the CA in PEM, for a webhook's caBundle.
func (e *Env) ServingCert(dir string) (caPEM []byte, err error) {
	if e.pki == nil {
		return nil, fmt.Errorf("controlplane: no CA")
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	caPEM, err = os.ReadFile(e.pki.caCert)
	if err != nil {
		return nil, err
	}
	caKeyPEM, err := os.ReadFile(e.pki.caKey)
	if err != nil {
		return nil, err
	}
	cb, _ := pem.Decode(caPEM)
	kb, _ := pem.Decode(caKeyPEM)
	if cb == nil || kb == nil {
		return nil, fmt.Errorf("controlplane: unreadable CA")
	}
	ca, err := x509.ParseCertificate(cb.Bytes)
	if err != nil {
		return nil, err
	}
	caKey, err := x509.ParseECPrivateKey(kb.Bytes)
	if err != nil {
		return nil, err
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano()),
		Subject:      pkix.Name{CommonName: "gantry-webhook"},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(24 * 365 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IPAddresses:  []net.IP{net.ParseIP("127.0.0.1")},
		DNSNames:     []string{"localhost"},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		return nil, err
	}
	if err := writeCert(filepath.Join(dir, "tls.crt"), der); err != nil {
		return nil, err
	}
	return caPEM, writeKey(filepath.Join(dir, "tls.key"), key)
}
