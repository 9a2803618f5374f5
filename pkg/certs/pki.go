package certs

import (
	"bytes"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"time"
)

// Keys of the Secret. tls.crt and tls.key are what a kubernetes.io/tls Secret holds, so
// the Secret can also be mounted as a volume; ca.crt is the caBundle the webhook
// configurations get (the current CA, then any older one still valid); ca.key signs
// serving certificates.
const (
	KeyCACert  = "ca.crt"
	KeyCAKey   = "ca.key"
	KeyTLSCert = "tls.crt"
	KeyTLSKey  = "tls.key"
)

// bundle is the PKI kept in the Secret.
type bundle struct {
	caCert   []*x509.Certificate // current CA first, then older CAs still trusted
	caKey    crypto.Signer
	caPEM    []byte
	caKeyPEM []byte
	cert     *x509.Certificate
	certPEM  []byte
	keyPEM   []byte
}

// parseBundle reads the Secret's data. A missing or broken part leaves the matching
// field nil; the caller decides what to regenerate.
func parseBundle(data map[string][]byte) *bundle {
	b := &bundle{}
	if cas := parseCerts(data[KeyCACert]); len(cas) > 0 {
		if key, err := parseKey(data[KeyCAKey]); err == nil && publicKeysEqual(cas[0].PublicKey, key.Public()) {
			b.caCert, b.caKey, b.caPEM, b.caKeyPEM = cas, key, data[KeyCACert], data[KeyCAKey]
		}
	}
	if certs := parseCerts(data[KeyTLSCert]); len(certs) > 0 {
		if _, err := tls.X509KeyPair(data[KeyTLSCert], data[KeyTLSKey]); err == nil {
			b.cert, b.certPEM, b.keyPEM = certs[0], data[KeyTLSCert], data[KeyTLSKey]
		}
	}
	return b
}

func (b *bundle) data() map[string][]byte {
	return map[string][]byte{KeyCACert: b.caPEM, KeyCAKey: b.caKeyPEM, KeyTLSCert: b.certPEM, KeyTLSKey: b.keyPEM}
}

// newCA makes a self-signed CA valid for validity from now. previous are older CA
// certificates that stay in the bundle while they are valid, so that a serving
// certificate they signed is still trusted while the new one rolls out.
func newCA(name string, now time.Time, validity time.Duration, previous []*x509.Certificate) (*bundle, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial(),
		Subject:               pkix.Name{CommonName: name, Organization: []string{"gantry"}},
		NotBefore:             now.Add(-time.Hour), // tolerate clock skew between nodes
		NotAfter:              now.Add(validity),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		return nil, err
	}
	ca, _ := x509.ParseCertificate(der)
	keyPEM, err := encodeKey(key)
	if err != nil {
		return nil, err
	}
	b := &bundle{caCert: []*x509.Certificate{ca}, caKey: key, caKeyPEM: keyPEM}
	for _, old := range previous {
		if now.Before(old.NotAfter) && !old.Equal(ca) {
			b.caCert = append(b.caCert, old)
		}
	}
	var pemBuf bytes.Buffer
	for _, c := range b.caCert {
		_ = pem.Encode(&pemBuf, &pem.Block{Type: "CERTIFICATE", Bytes: c.Raw})
	}
	b.caPEM = pemBuf.Bytes()
	return b, nil
}

// issue signs a serving certificate for dnsNames with the bundle's CA, valid for
// validity but never past the CA.
func (b *bundle) issue(dnsNames []string, now time.Time, validity time.Duration) error {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	notAfter := now.Add(validity)
	if ca := b.caCert[0]; notAfter.After(ca.NotAfter) {
		notAfter = ca.NotAfter
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial(),
		Subject:      pkix.Name{CommonName: dnsNames[0]},
		DNSNames:     dnsNames,
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     notAfter,
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, b.caCert[0], key.Public(), b.caKey)
	if err != nil {
		return err
	}
	b.cert, _ = x509.ParseCertificate(der)
	b.certPEM = pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
	b.keyPEM, err = encodeKey(key)
	return err
}

// servingValid reports whether the serving certificate covers dnsNames, chains to the
// current CA, and is valid at t.
func (b *bundle) servingValid(dnsNames []string, t time.Time) bool {
	if b.cert == nil || len(b.caCert) == 0 {
		return false
	}
	roots := x509.NewCertPool()
	roots.AddCert(b.caCert[0])
	for _, name := range dnsNames {
		if _, err := b.cert.Verify(x509.VerifyOptions{
			DNSName: name, Roots: roots, CurrentTime: t,
			KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		}); err != nil {
			return false
		}
	}
	return true
}

// renewAt is when a certificate valid from notBefore to notAfter is renewed: once
// less than a third of its lifetime is left.
func renewAt(c *x509.Certificate) time.Time {
	life := c.NotAfter.Sub(c.NotBefore)
	return c.NotAfter.Add(-life / 3)
}

func parseCerts(data []byte) []*x509.Certificate {
	var out []*x509.Certificate
	for {
		var block *pem.Block
		block, data = pem.Decode(data)
		if block == nil {
			return out
		}
		if block.Type != "CERTIFICATE" {
			continue
		}
		c, err := x509.ParseCertificate(block.Bytes)
		if err != nil {
			return nil
		}
		out = append(out, c)
	}
}

func parseKey(data []byte) (crypto.Signer, error) {
	block, _ := pem.Decode(data)
	if block == nil {
		return nil, errors.New("no PEM block")
	}
	k, err := x509.ParsePKCS8PrivateKey(block.Bytes)
	if err != nil {
		return nil, err
	}
	s, ok := k.(crypto.Signer)
	if !ok {
		return nil, fmt.Errorf("key of type %T cannot sign", k)
	}
	return s, nil
}

func encodeKey(key crypto.Signer) ([]byte, error) {
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), nil
}

func publicKeysEqual(a, b crypto.PublicKey) bool {
	ea, ok := a.(interface{ Equal(crypto.PublicKey) bool })
	return ok && ea.Equal(b)
}

func serial() *big.Int {
	n, _ := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	return n
}
