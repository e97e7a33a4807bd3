// Command web is the HTTP server tests/node runs in a real container: built
// static by the test, it is the only file of an image made FROM scratch. It
// answers every request with CAPN_WEB_TOKEN (set on the container, so the
// test knows the answer came from this container) and the addresses of its
// network interfaces (the container's own, from CNI). With the argument
// "pause" it only waits for a signal: the pod sandbox of the kubelet test.
package main

import (
	"fmt"
	"log"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
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
	})
	log.Printf("web: listening on %s", addr)
	log.Fatal(http.ListenAndServe(addr, nil))
}
