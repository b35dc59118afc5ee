package natsauth_test

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nkeys"
	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger/internal/bus"
	"github.com/opledger/opledger/internal/natsembed"
)

// pki is a throwaway CA with a server certificate for 127.0.0.1 and a
// client certificate, written as PEM files.
type pki struct{ ca, serverCert, serverKey, clientCert, clientKey string }

func writePEM(t *testing.T, path, typ string, der []byte) {
	t.Helper()
	require.NoError(t, os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600))
}

func newPKI(t *testing.T, dir string) pki {
	t.Helper()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "opledger test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	require.NoError(t, err)
	ca, err := x509.ParseCertificate(caDER)
	require.NoError(t, err)
	p := pki{ca: filepath.Join(dir, "ca.pem")}
	writePEM(t, p.ca, "CERTIFICATE", caDER)
	leaf := func(name string, serial int64, usage x509.ExtKeyUsage) (certPath, keyPath string) {
		key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		require.NoError(t, err)
		tmpl := &x509.Certificate{SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: name},
			NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
			KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{usage},
			IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
		require.NoError(t, err)
		kder, err := x509.MarshalECPrivateKey(key)
		require.NoError(t, err)
		certPath, keyPath = filepath.Join(dir, name+".pem"), filepath.Join(dir, name+"-key.pem")
		writePEM(t, certPath, "CERTIFICATE", der)
		writePEM(t, keyPath, "EC PRIVATE KEY", kder)
		return certPath, keyPath
	}
	p.serverCert, p.serverKey = leaf("server", 2, x509.ExtKeyUsageServerAuth)
	p.clientCert, p.clientKey = leaf("client", 3, x509.ExtKeyUsageClientAuth)
	return p
}

func startConf(t *testing.T, conf string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "nats.conf")
	require.NoError(t, os.WriteFile(path, []byte(conf), 0o600))
	ns, err := natsembed.Start(natsembed.Options{ConfigFile: path})
	require.NoError(t, err)
	t.Cleanup(ns.Shutdown)
	return ns.URL()
}

func connectAs(t *testing.T, url string, a bus.Auth) error {
	t.Helper()
	b, err := bus.ConnectAuth(ctx(t), url, t.Name(), a, zerolog.Nop())
	if err == nil {
		b.Close()
	}
	return err
}

// A service reaches a server that requires TLS with verified client
// certificates and a token, given the CA, its certificate and the token
// file; without any one of them it is refused. Breaking it: Auth.Options
// not passing the CA or the client certificate, or falling back to plain
// text.
func TestServiceConnectsWithTLSAndToken(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	p := newPKI(t, dir)
	tokenFile := filepath.Join(dir, "token")
	require.NoError(t, os.WriteFile(tokenFile, []byte("tok-3f9a\n"), 0o600))
	url := startConf(t, fmt.Sprintf(`
tls { cert_file: %q, key_file: %q, ca_file: %q, verify: true }
authorization { token: "tok-3f9a" }
`, p.serverCert, p.serverKey, p.ca))

	ok := bus.Auth{TokenFile: tokenFile, TLSCA: p.ca, TLSCert: p.clientCert, TLSKey: p.clientKey}
	require.NoError(t, connectAs(t, url, ok))

	noCert := ok
	noCert.TLSCert, noCert.TLSKey = "", ""
	require.Error(t, connectAs(t, url, noCert), "the server verifies client certificates")
	noTLS := bus.Auth{TokenFile: tokenFile}
	require.Error(t, connectAs(t, url, noTLS), "the server requires TLS")
	wrongCA := ok
	wrongCA.TLSCA = newPKI(t, t.TempDir()).ca
	require.Error(t, connectAs(t, url, wrongCA), "a server certificate from another CA is refused")
	wrongToken := ok
	wrongToken.TokenFile, wrongToken.Token = "", "tok-wrong"
	err := connectAs(t, url, wrongToken)
	require.True(t, isAuthError(err), "want an authorization violation, got %v", err)
}

// A service authenticates with an nkey seed file: the server knows only the
// public key. Breaking it: Auth.Options not signing the server's nonce with
// the seed.
func TestServiceConnectsWithNkey(t *testing.T) {
	t.Parallel()
	kp, err := nkeys.CreateUser()
	require.NoError(t, err)
	pub, err := kp.PublicKey()
	require.NoError(t, err)
	seed, err := kp.Seed()
	require.NoError(t, err)
	other, err := nkeys.CreateUser()
	require.NoError(t, err)
	otherSeed, err := other.Seed()
	require.NoError(t, err)
	dir := t.TempDir()
	seedFile, otherFile := filepath.Join(dir, "svc.nk"), filepath.Join(dir, "other.nk")
	require.NoError(t, os.WriteFile(seedFile, seed, 0o600))
	require.NoError(t, os.WriteFile(otherFile, otherSeed, 0o600))
	url := startConf(t, fmt.Sprintf(`authorization { users: [ { nkey: %q } ] }`, pub))

	require.NoError(t, connectAs(t, url, bus.Auth{NkeySeedFile: seedFile}))
	err = connectAs(t, url, bus.Auth{NkeySeedFile: otherFile})
	require.True(t, isAuthError(err), "another key is refused, got %v", err)
	err = connectAs(t, url, bus.Auth{})
	require.True(t, isAuthError(err), "no key is refused, got %v", err)
}

// A service authenticates with a creds file against a server in operator
// mode (accounts and users as JWTs). Breaking it: Auth.Options not loading
// the JWT and signing with the seed in the file.
func TestServiceConnectsWithCreds(t *testing.T) {
	t.Parallel()
	okp, err := nkeys.CreateOperator()
	require.NoError(t, err)
	opub, err := okp.PublicKey()
	require.NoError(t, err)
	ojwt, err := jwt.NewOperatorClaims(opub).Encode(okp)
	require.NoError(t, err)
	akp, err := nkeys.CreateAccount()
	require.NoError(t, err)
	apub, err := akp.PublicKey()
	require.NoError(t, err)
	ajwt, err := jwt.NewAccountClaims(apub).Encode(okp)
	require.NoError(t, err)
	creds := func(name string, signer nkeys.KeyPair) string {
		ukp, err := nkeys.CreateUser()
		require.NoError(t, err)
		upub, err := ukp.PublicKey()
		require.NoError(t, err)
		uc := jwt.NewUserClaims(upub)
		uc.IssuerAccount = apub
		ujwt, err := uc.Encode(signer)
		require.NoError(t, err)
		seed, err := ukp.Seed()
		require.NoError(t, err)
		data, err := jwt.FormatUserConfig(ujwt, seed)
		require.NoError(t, err)
		path := filepath.Join(t.TempDir(), name+".creds")
		require.NoError(t, os.WriteFile(path, data, 0o600))
		return path
	}
	skp, err := nkeys.CreateAccount() // the system account JetStream needs
	require.NoError(t, err)
	spub, err := skp.PublicKey()
	require.NoError(t, err)
	sjwt, err := jwt.NewAccountClaims(spub).Encode(okp)
	require.NoError(t, err)
	url := startConf(t, fmt.Sprintf("operator: %q\nsystem_account: %s\nresolver: MEMORY\nresolver_preload: { %s: %q, %s: %q }\n",
		ojwt, spub, apub, ajwt, spub, sjwt))

	require.NoError(t, connectAs(t, url, bus.Auth{CredsFile: creds("svc", akp)}))
	stranger, err := nkeys.CreateAccount() // signs a user for an account the server does not know
	require.NoError(t, err)
	err = connectAs(t, url, bus.Auth{CredsFile: creds("stranger", stranger)})
	require.True(t, isAuthError(err), "a user signed by an unknown key is refused, got %v", err)
}
