// Command goecho is the cheapest mutating admission webhook written in Go: it parses each AdmissionReview and
// answers `allowed` with the request's uid and no patch. bench/real_webhook_create_bench.py registers it beside
// `bridge webhook` and bench/echo_webhook.py (the same answer on our Python HTTPS shell), so that `goecho - plain`
// is the floor the API server's webhook dispatch costs a pod CREATE with a webhook server far cheaper than ours,
// and `echo - goecho` is what our HTTPS shell costs on top of it.
//
// It serves HTTP/1.1 only, as the API server talks to a webhook behind a Service (k8s.io/apiserver
// pkg/util/webhook/client.go sets NextProtos to http/1.1 for service references and for every URL that is not a
// loopback address), which is how the chart registers `bridge webhook`.
//
//	goecho -cert FILE -key FILE    prints "port <n>" once it serves on 127.0.0.1, then serves until killed
//
// GET /stats answers {"connections": accepted TLS connections, "reviews": reviews answered} so the bench can tell
// how often the API server opened a connection.
package main

import (
	"crypto/tls"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"sync/atomic"
	"time"
)

type admissionReview struct {
	APIVersion string             `json:"apiVersion"`
	Kind       string             `json:"kind"`
	Request    *admissionRequest  `json:"request,omitempty"`
	Response   *admissionResponse `json:"response,omitempty"`
}

type admissionRequest struct {
	UID string `json:"uid"`
}

type admissionResponse struct {
	UID     string `json:"uid"`
	Allowed bool   `json:"allowed"`
}

// The API server's own limit on a request body is 3 MiB; a pod's review is far smaller.
const maxBody = 3 << 20

var connections, reviews atomic.Int64

func mutate(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		http.Error(w, "POST an AdmissionReview", http.StatusMethodNotAllowed)
		return
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, maxBody+1))
	if err != nil || len(body) > maxBody {
		http.Error(w, "body unreadable or larger than 3 MiB", http.StatusBadRequest)
		return
	}
	var in admissionReview
	if err := json.Unmarshal(body, &in); err != nil || in.Request == nil || in.Request.UID == "" {
		http.Error(w, "not an AdmissionReview with a request.uid", http.StatusBadRequest)
		return
	}
	out, err := json.Marshal(admissionReview{APIVersion: "admission.k8s.io/v1", Kind: "AdmissionReview",
		Response: &admissionResponse{UID: in.Request.UID, Allowed: true}})
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	reviews.Add(1)
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(out)
}

func stats(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(map[string]int64{"connections": connections.Load(), "reviews": reviews.Load()})
}

func main() {
	certFile := flag.String("cert", "", "PEM serving certificate")
	keyFile := flag.String("key", "", "PEM private key of the certificate")
	flag.Parse()
	pair, err := tls.LoadX509KeyPair(*certFile, *keyFile)
	if err != nil {
		fmt.Fprintf(os.Stderr, "goecho: loading -cert %q and -key %q: %v\n", *certFile, *keyFile, err)
		os.Exit(2)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fmt.Fprintf(os.Stderr, "goecho: %v\n", err)
		os.Exit(1)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/mutate", mutate)
	mux.HandleFunc("/stats", stats)
	srv := &http.Server{
		Handler:           mux,
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       5 * time.Minute,
		TLSConfig: &tls.Config{Certificates: []tls.Certificate{pair}, MinVersion: tls.VersionTLS12,
			NextProtos: []string{"http/1.1"}},
		// A non-nil, empty map: net/http does not add HTTP/2.
		TLSNextProto: map[string]func(*http.Server, *tls.Conn, http.Handler){},
		ConnState: func(_ net.Conn, state http.ConnState) {
			if state == http.StateNew {
				connections.Add(1)
			}
		},
	}
	fmt.Printf("port %d\n", ln.Addr().(*net.TCPAddr).Port)
	if err := srv.ServeTLS(ln, "", ""); err != nil {
		fmt.Fprintf(os.Stderr, "goecho: %v\n", err)
		os.Exit(1)
	}
}
