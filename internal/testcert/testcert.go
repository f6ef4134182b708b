// Package testcert makes a throw-away certificate authority, a server
// certificate and client certificates for TLS tests (crypto/x509, ECDSA
// P-256), written as PEM files in a test's directory.
package testcert

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// Set is a CA and the files of its certificates.
type Set struct {
	Dir        string
	CAFile     string // the CA certificate (PEM)
	ServerCert string // for 127.0.0.1, ::1 and localhost
	ServerKey  string
	ca         *x509.Certificate
	caKey      *ecdsa.PrivateKey
	serial     int64
}

// New makes a CA and a server certificate in t's temporary directory.
func New(t testing.TB) *Set {
	t.Helper()
	s := &Set{Dir: t.TempDir()}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "Herald test CA"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	s.ca, _ = x509.ParseCertificate(der)
	s.caKey = key
	s.serial = 1
	s.CAFile = filepath.Join(s.Dir, "ca.crt")
	writePEM(t, s.CAFile, "CERTIFICATE", der)
	s.ServerCert, s.ServerKey = s.issue(t, "server", "herald-test-server", func(c *x509.Certificate) {
		c.DNSNames = []string{"localhost"}
		c.IPAddresses = []net.IP{net.ParseIP("127.0.0.1"), net.ParseIP("::1")}
		c.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}
	})
	return s
}

// Client issues a client certificate with common name cn and the given DNS
// subject alternative names; it returns the certificate and key files.
func (s *Set) Client(t testing.TB, cn string, dnsNames ...string) (certFile, keyFile string) {
	t.Helper()
	return s.issue(t, "client-"+cn, cn, func(c *x509.Certificate) {
		c.DNSNames = dnsNames
		c.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}
	})
}

func (s *Set) issue(t testing.TB, file, cn string, adjust func(*x509.Certificate)) (string, string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	s.serial++
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(s.serial),
		Subject:      pkix.Name{CommonName: cn},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
	}
	adjust(tmpl)
	der, err := x509.CreateCertificate(rand.Reader, tmpl, s.ca, &key.PublicKey, s.caKey)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	certFile, keyFile := filepath.Join(s.Dir, file+".crt"), filepath.Join(s.Dir, file+".key")
	writePEM(t, certFile, "CERTIFICATE", der)
	writePEM(t, keyFile, "EC PRIVATE KEY", kder)
	return certFile, keyFile
}

// ClientTLS is a client configuration trusting the CA, presenting the
// given certificate (none when certFile is empty).
func (s *Set) ClientTLS(t testing.TB, certFile, keyFile string) *tls.Config {
	t.Helper()
	pool := x509.NewCertPool()
	pool.AddCert(s.ca)
	tc := &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	if certFile != "" {
		c, err := tls.LoadX509KeyPair(certFile, keyFile)
		if err != nil {
			t.Fatal(err)
		}
		tc.Certificates = []tls.Certificate{c}
	}
	return tc
}

func writePEM(t testing.TB, path, typ string, der []byte) {
	t.Helper()
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
}
