package server

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"sync"
	"time"
)

// fileStamp identifies one version of a file: a rewrite or an atomic rename (as Kubernetes
// does for mounted Secrets) changes its modification time or size.
type fileStamp struct {
	mod  time.Time
	size int64
}

func stampsOf(paths []string) ([]fileStamp, error) {
	out := make([]fileStamp, len(paths))
	for i, p := range paths {
		fi, err := os.Stat(p)
		if err != nil {
			return nil, err
		}
		out[i] = fileStamp{fi.ModTime(), fi.Size()}
	}
	return out, nil
}

func sameStamps(a, b []fileStamp) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if !a[i].mod.Equal(b[i].mod) || a[i].size != b[i].size {
			return false
		}
	}
	return true
}

// reloading holds a value parsed from files and parses it again when any file changes. The
// files are checked (one stat each) whenever the value is asked for, which is once per TLS
// handshake; a file that fails to parse keeps the last good value (and the error is returned
// only while there is none), so a half-written rotation never takes the router down.
type reloading[T any] struct {
	what  string // flag names, for errors
	paths []string
	parse func(paths []string) (T, error)

	mu     sync.Mutex
	stamps []fileStamp
	val    T
	ok     bool
}

func (r *reloading[T]) get() (T, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	st, err := stampsOf(r.paths)
	if err == nil && r.ok && sameStamps(st, r.stamps) {
		return r.val, nil
	}
	if err == nil {
		var v T
		if v, err = r.parse(r.paths); err == nil {
			r.val, r.stamps, r.ok = v, st, true
			return v, nil
		}
	}
	if r.ok {
		return r.val, nil
	}
	var zero T
	return zero, fmt.Errorf("%s: %w", r.what, err)
}

func loadKeyPair(paths []string) (*tls.Certificate, error) {
	c, err := tls.LoadX509KeyPair(paths[0], paths[1])
	if err != nil {
		return nil, err
	}
	return &c, nil
}

func loadPool(paths []string) (*x509.CertPool, error) {
	pool := x509.NewCertPool()
	for _, p := range paths {
		pem, err := os.ReadFile(p)
		if err != nil {
			return nil, err
		}
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("%s holds no PEM certificate", p)
		}
	}
	return pool, nil
}

// workerTLS builds the client TLS settings for https:// workers: certificates verified
// against the --ca-cert-paths bundles (the system roots when none are given) and the
// --client-cert-path/--client-key-path certificate presented when a worker asks for one. Both
// are re-read when their files change, so a rotated certificate is used from the next
// connection on. nil means Go's defaults (system roots, no client certificate).
func workerTLS(certPath, keyPath string, caPaths []string) (*tls.Config, error) {
	if certPath == "" && len(caPaths) == 0 {
		return nil, nil
	}
	tc := &tls.Config{MinVersion: tls.VersionTLS12}
	if certPath != "" {
		cert := &reloading[*tls.Certificate]{what: "--client-cert-path/--client-key-path", paths: []string{certPath, keyPath}, parse: loadKeyPair}
		if _, err := cert.get(); err != nil {
			return nil, err
		}
		tc.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return cert.get() }
	}
	if len(caPaths) > 0 {
		roots := &reloading[*x509.CertPool]{what: "--ca-cert-paths", paths: caPaths, parse: loadPool}
		if _, err := roots.get(); err != nil {
			return nil, err
		}
		// The standard verification, against the roots read now rather than at start
		// (crypto/tls's documented pattern for custom verification: skip the built-in
		// check, verify in VerifyConnection). Nothing is accepted unverified.
		tc.InsecureSkipVerify = true
		tc.VerifyConnection = func(cs tls.ConnectionState) error {
			if len(cs.PeerCertificates) == 0 {
				return errors.New("worker presented no certificate")
			}
			pool, err := roots.get()
			if err != nil {
				return err
			}
			opts := x509.VerifyOptions{DNSName: cs.ServerName, Roots: pool, Intermediates: x509.NewCertPool()}
			for _, c := range cs.PeerCertificates[1:] {
				opts.Intermediates.AddCert(c)
			}
			if _, err := cs.PeerCertificates[0].Verify(opts); err != nil {
				return fmt.Errorf("worker certificate for %s not trusted by --ca-cert-paths: %w", cs.ServerName, err)
			}
			return nil
		}
	}
	return tc, nil
}

// ServingTLS returns the TLS settings of serve's HTTPS listener (--tls-cert-path,
// --tls-key-path), re-reading the pair when the files change.
func ServingTLS(certPath, keyPath string) (*tls.Config, error) {
	cert := &reloading[*tls.Certificate]{what: "--tls-cert-path/--tls-key-path", paths: []string{certPath, keyPath}, parse: loadKeyPair}
	if _, err := cert.get(); err != nil {
		return nil, err
	}
	return &tls.Config{MinVersion: tls.VersionTLS12,
		GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) { return cert.get() }}, nil
}
