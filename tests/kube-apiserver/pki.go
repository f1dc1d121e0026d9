package main

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// Identities written to the static token file.
const (
	adminUser      = "admin"
	controllerUser = "route-controller-user"
)

// material is everything the harness generates once per data directory and
// reuses on every later start, so that clients keep working across restarts.
type material struct {
	caCertFile     string
	caCertPEM      []byte
	serverCertFile string
	serverKeyFile  string
	saKeyFile      string
	saPubFile      string
	tokenFile      string
	adminToken     string
	controllerTok  string
}

// ensureMaterial creates (or loads) the CA, the serving certificate, the
// service-account signing key and the static tokens in dir.
func ensureMaterial(dir string) (*material, error) {
	m := &material{
		caCertFile:     filepath.Join(dir, "ca.crt"),
		serverCertFile: filepath.Join(dir, "apiserver.crt"),
		serverKeyFile:  filepath.Join(dir, "apiserver.key"),
		saKeyFile:      filepath.Join(dir, "sa.key"),
		saPubFile:      filepath.Join(dir, "sa.pub"),
		tokenFile:      filepath.Join(dir, "tokens.csv"),
	}
	caKeyFile := filepath.Join(dir, "ca.key")

	// CA and serving certificate: generated together, so that a half-written
	// set from an interrupted first start is regenerated as a whole.
	if !exists(m.caCertFile) || !exists(caKeyFile) || !exists(m.serverCertFile) || !exists(m.serverKeyFile) {
		if err := writeCerts(m.caCertFile, caKeyFile, m.serverCertFile, m.serverKeyFile); err != nil {
			return nil, err
		}
	}
	caPEM, err := os.ReadFile(m.caCertFile)
	if err != nil {
		return nil, err
	}
	m.caCertPEM = caPEM

	// Service-account token signing key, and its public half for
	// --service-account-key-file (which does not take a PKCS#8 private key).
	if !exists(m.saKeyFile) || !exists(m.saPubFile) {
		key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			return nil, err
		}
		pub, err := x509.MarshalPKIXPublicKey(key.Public())
		if err != nil {
			return nil, err
		}
		if err := writeKey(m.saKeyFile, key); err != nil {
			return nil, err
		}
		if err := writeFileAtomic(m.saPubFile, pemBlock("PUBLIC KEY", pub), 0o644); err != nil {
			return nil, err
		}
	}

	adminTokFile := filepath.Join(dir, "admin.token")
	ctrlTokFile := filepath.Join(dir, "controller.token")
	if m.adminToken, err = ensureToken(adminTokFile); err != nil {
		return nil, err
	}
	if m.controllerTok, err = ensureToken(ctrlTokFile); err != nil {
		return nil, err
	}
	// Format: token,user,uid[,"group1,group2"]. The controller user has no
	// group beyond system:authenticated, which the apiserver adds itself.
	csv := fmt.Sprintf("%s,%s,%s,\"system:masters\"\n%s,%s,%s\n",
		m.adminToken, adminUser, adminUser,
		m.controllerTok, controllerUser, controllerUser)
	if err := writeFileAtomic(m.tokenFile, []byte(csv), 0o600); err != nil {
		return nil, err
	}
	return m, nil
}

func ensureToken(path string) (string, error) {
	if b, err := os.ReadFile(path); err == nil {
		if tok := strings.TrimSpace(string(b)); tok != "" {
			return tok, nil
		}
	} else if !errors.Is(err, os.ErrNotExist) {
		return "", err
	}
	buf := make([]byte, 24)
	if _, err := rand.Read(buf); err != nil {
		return "", err
	}
	tok := hex.EncodeToString(buf)
	return tok, writeFileAtomic(path, []byte(tok+"\n"), 0o600)
}

func writeCerts(caCertFile, caKeyFile, serverCertFile, serverKeyFile string) error {
	now := time.Now().Add(-time.Hour)
	notAfter := now.Add(10 * 365 * 24 * time.Hour)

	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	caTmpl := &x509.Certificate{
		SerialNumber:          serial(),
		Subject:               pkix.Name{CommonName: "route-controller-test-ca"},
		NotBefore:             now,
		NotAfter:              notAfter,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, caKey.Public(), caKey)
	if err != nil {
		return err
	}
	caCert, err := x509.ParseCertificate(caDER)
	if err != nil {
		return err
	}

	srvKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	srvTmpl := &x509.Certificate{
		SerialNumber: serial(),
		Subject:      pkix.Name{CommonName: "kube-apiserver"},
		NotBefore:    now,
		NotAfter:     notAfter,
		KeyUsage:     x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IPAddresses:  []net.IP{net.ParseIP("127.0.0.1"), net.ParseIP("::1"), serviceIP},
		DNSNames: []string{"localhost", "kubernetes", "kubernetes.default",
			"kubernetes.default.svc", "kubernetes.default.svc.cluster.local"},
	}
	srvDER, err := x509.CreateCertificate(rand.Reader, srvTmpl, caCert, srvKey.Public(), caKey)
	if err != nil {
		return err
	}

	// Keys first, certificates last: the existence check above looks at all four.
	if err := writeKey(caKeyFile, caKey); err != nil {
		return err
	}
	if err := writeKey(serverKeyFile, srvKey); err != nil {
		return err
	}
	if err := writeFileAtomic(serverCertFile, pemBlock("CERTIFICATE", srvDER), 0o644); err != nil {
		return err
	}
	return writeFileAtomic(caCertFile, pemBlock("CERTIFICATE", caDER), 0o644)
}

func serial() *big.Int {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	if err != nil {
		panic(err)
	}
	return n.Add(n, big.NewInt(1))
}

func writeKey(path string, key crypto.Signer) error {
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return err
	}
	return writeFileAtomic(path, pemBlock("PRIVATE KEY", der), 0o600)
}

func pemBlock(typ string, der []byte) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der})
}

func exists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

// writeFileAtomic writes to a temporary file and renames it into place, so
// that a reader never sees a partial file.
func writeFileAtomic(path string, data []byte, perm os.FileMode) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Chmod(perm); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}
