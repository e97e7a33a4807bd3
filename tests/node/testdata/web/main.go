// Command web is the HTTP server tests/node runs in a real container: built
// static by the test, it is the only file of an image made FROM scratch. It
// answers every request with CAPN_WEB_TOKEN (set on the container, so the
// test knows the answer came from this container) and the addresses of its
// network interfaces (the container's own, from CNI). With CAPN_WEB_FETCH
// set to a URL it also fetches that URL on every request and adds the
// answer, each line prefixed "fetched ": a pod on one node reaching one on
// another; a request's query parameter fetch=<URL> fetches that URL instead
// (a Service's ClusterIP or DNS name, asked of a pod by the test). With the
// argument "pause" it only waits for a signal: the pod
// sandbox of the kubelet test.
package main

import (
	"bufio"
	"fmt"
	"log"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"
)

func main() {
	if len(os.Args) > 1 && os.Args[1] == "pause" {
		c := make(chan os.Signal, 1)
		signal.Notify(c, syscall.SIGINT, syscall.SIGTERM)
		<-c
		return
	}
	addr := os.Getenv("CAPN_WEB_ADDR")
	if addr == "" {
		addr = ":8080"
	}
	http.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "token=%s\n", os.Getenv("CAPN_WEB_TOKEN"))
		fmt.Fprintf(w, "pid=%d\n", os.Getpid())
		addrs, _ := net.InterfaceAddrs()
		for _, a := range addrs {
			fmt.Fprintf(w, "addr=%s\n", a)
		}
		url := os.Getenv("CAPN_WEB_FETCH")
		if q := r.URL.Query().Get("fetch"); q != "" {
			url = q
		}
		if url != "" {
			fetch(w, url)
		}
	})
	log.Printf("web: listening on %s", addr)
	log.Fatal(http.ListenAndServe(addr, nil))
}

// fetch GETs url on a connection of its own and writes its answer, or
// the error, line by line. No connection is kept for the next request: a
// Service's ClusterIP would then answer from the pod the first connection
// reached, every time.
func fetch(w http.ResponseWriter, url string) {
	client := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	resp, err := client.Get(url)
	if err != nil {
		fmt.Fprintf(w, "fetch-error=%v\n", err)
		return
	}
	defer resp.Body.Close()
	fmt.Fprintf(w, "fetched-status=%d\n", resp.StatusCode)
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		fmt.Fprintf(w, "fetched %s\n", sc.Text())
	}
}
