package engine

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
)

// Image is what GET /images/{name}/json says (the fields used).
type Image struct {
	ID       string   `json:"Id"`
	RepoTags []string `json:"RepoTags"`
}

// ImageInspect returns a local image (ErrNotFound when it is not there:
// this client never pulls).
func (c *Client) ImageInspect(ctx context.Context, name string) (*Image, error) {
	out := new(Image)
	if err := c.do(ctx, http.MethodGet, "/images/"+name+"/json", nil, nil, out); err != nil {
		return nil, err
	}
	return out, nil
}

// ImageBuild builds tag from a tar build context holding dockerfile,
// without pulling anything (a FROM scratch image needs nothing). It
// returns the build's output, and an error naming the failed step.
func (c *Client) ImageBuild(ctx context.Context, tag, dockerfile string, buildContext io.Reader) (string, error) {
	q := url.Values{"t": {tag}, "dockerfile": {dockerfile}, "rm": {"1"}, "forcerm": {"1"}}
	resp, err := c.send(ctx, http.MethodPost, "/build", q, buildContext, "application/x-tar")
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	var log strings.Builder
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 4<<20)
	for sc.Scan() {
		var line struct {
			Stream string `json:"stream"`
			Error  string `json:"error"`
		}
		if json.Unmarshal(sc.Bytes(), &line) != nil {
			continue
		}
		log.WriteString(line.Stream)
		if line.Error != "" {
			return log.String(), fmt.Errorf("docker build %s: %s", tag, line.Error)
		}
	}
	if err := sc.Err(); err != nil {
		return log.String(), fmt.Errorf("docker build %s: %w", tag, err)
	}
	return log.String(), nil
}

// ImageRemove removes a local image (ErrNotFound when it is not there).
func (c *Client) ImageRemove(ctx context.Context, name string, force bool) error {
	q := url.Values{"force": {fmt.Sprint(force)}}
	return c.do(ctx, http.MethodDelete, "/images/"+name, q, nil, nil)
}
