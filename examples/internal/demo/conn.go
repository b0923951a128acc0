// Package demo holds what the runnable examples share: finding a Redis to
// talk to (a URL, a cluster, the local server or an embedded one), running
// the work in several worker processes, and measuring and printing it.
package demo

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
)

// DefaultProbe is the address tried when no Redis is named.
const DefaultProbe = "localhost:6379"

// A Conn is a client for the Redis a demo runs against, and the URL that
// names it for worker processes.
type Conn struct {
	// Client talks to the server: a *redis.Client, or a *redis.ClusterClient
	// when several addresses were given.
	Client redis.UniversalClient
	// URL names the server so that another process can reach it.
	URL string
	// Embedded reports whether the server is a miniredis inside this process.
	Embedded bool

	mini     *miniredis.Miniredis
	stopTime chan struct{} // stops the embedded server's clock
	timeDone chan struct{}
}

// Close closes the client and stops the embedded server, if any.
func (c *Conn) Close() error {
	err := c.Client.Close()
	if c.mini != nil {
		close(c.stopTime)
		<-c.timeDone
		c.mini.Close()
	}
	return err
}

// tickInterval is how often the embedded server's TTLs are advanced.
const tickInterval = 5 * time.Millisecond

// runClock makes the embedded server's keys expire in real time. miniredis
// only counts TTLs down when told to (FastForward), so without this no
// cached value or lock lease would ever expire.
func (c *Conn) runClock() {
	defer close(c.timeDone)
	t := time.NewTicker(tickInterval)
	defer t.Stop()
	last := time.Now()
	for {
		select {
		case <-c.stopTime:
			return
		case now := <-t.C:
			c.mini.FastForward(now.Sub(last))
			last = now
		}
	}
}

// Connect returns a client for spec, a Redis URL (redis:// or rediss://,
// with user, password and db), a bare host:port, or several comma-separated
// addresses for a Redis Cluster (redis://:pw@a:7000,b:7001,c:7002). When spec
// is empty it uses probe (normally [DefaultProbe]) if a Redis answers there,
// and otherwise (or when probe is empty too) starts an embedded miniredis
// and writes one line saying so to w. Connect checks that the server answers PING.
func Connect(ctx context.Context, spec, probe string, w io.Writer) (*Conn, error) {
	if spec == "" {
		why := "embedded server requested"
		ok := false
		if probe != "" {
			ok, why = answers(ctx, probe)
		}
		if ok {
			spec = "redis://" + probe
		} else {
			m, err := miniredis.Run()
			if err != nil {
				return nil, fmt.Errorf("start embedded miniredis: %w", err)
			}
			fmt.Fprintf(w, "%s: using an embedded miniredis on %s (in-process; data lost on exit)\n", why, m.Addr())
			c := &Conn{
				Client:   redis.NewClient(&redis.Options{Addr: m.Addr()}),
				URL:      "redis://" + m.Addr(),
				Embedded: true,
				mini:     m,
				stopTime: make(chan struct{}),
				timeDone: make(chan struct{}),
			}
			go c.runClock()
			return c, nil
		}
	}
	client, url, err := NewClient(spec)
	if err != nil {
		return nil, err
	}
	pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := client.Ping(pctx).Err(); err != nil {
		_ = client.Close()
		return nil, fmt.Errorf("redis %s: %w", Redact(url), err)
	}
	return &Conn{Client: client, URL: url}, nil
}

// NewClient parses spec as [Connect] describes and returns a client for it,
// without any I/O, along with spec normalized to a URL.
func NewClient(spec string) (redis.UniversalClient, string, error) {
	spec = strings.TrimSpace(spec)
	if spec == "" {
		return nil, "", errors.New("empty Redis address")
	}
	if !strings.Contains(spec, "://") {
		spec = "redis://" + spec
	}
	if hasSeveralHosts(spec) {
		u, err := clusterURL(spec)
		if err != nil {
			return nil, "", err
		}
		opt, err := redis.ParseClusterURL(u)
		if err != nil {
			return nil, "", fmt.Errorf("redis cluster %s: %w", Redact(spec), err)
		}
		return redis.NewClusterClient(opt), spec, nil
	}
	opt, err := redis.ParseURL(spec)
	if err != nil {
		return nil, "", fmt.Errorf("redis %s: %w", Redact(spec), err)
	}
	return redis.NewClient(opt), spec, nil
}

// hostPart splits a URL into scheme "://" userinfo "@", hosts, and the
// path and query that follow them.
func hostPart(u string) (prefix, hosts, tail string) {
	i := strings.Index(u, "://") + 3
	rest := u[i:]
	end := strings.IndexAny(rest, "/?")
	if end < 0 {
		end = len(rest)
	}
	hosts, tail = rest[:end], rest[end:]
	prefix = u[:i]
	if at := strings.LastIndex(hosts, "@"); at >= 0 {
		prefix += hosts[:at+1]
		hosts = hosts[at+1:]
	}
	return prefix, hosts, tail
}

func hasSeveralHosts(u string) bool {
	_, hosts, _ := hostPart(u)
	return strings.Contains(hosts, ",")
}

// clusterURL rewrites redis://a,b,c?x=y into the form go-redis parses,
// redis://a?x=y&addr=b&addr=c.
func clusterURL(u string) (string, error) {
	prefix, hosts, tail := hostPart(u)
	addrs := strings.Split(hosts, ",")
	for _, a := range addrs {
		if a == "" {
			return "", fmt.Errorf("redis cluster %s: empty address", Redact(u))
		}
	}
	var b strings.Builder
	b.WriteString(prefix + addrs[0] + tail)
	sep := "?"
	if strings.Contains(tail, "?") {
		sep = "&"
	}
	for _, a := range addrs[1:] {
		b.WriteString(sep + "addr=" + a)
		sep = "&"
	}
	return b.String(), nil
}

// Redact returns u with its password replaced by "xxx", for messages.
func Redact(u string) string {
	prefix, hosts, tail := hostPart(u)
	if i := strings.Index(prefix, "://"); i >= 0 {
		user := prefix[i+3:]
		if c := strings.Index(user, ":"); c >= 0 {
			prefix = prefix[:i+3] + user[:c+1] + "xxx@"
		}
	}
	return prefix + hosts + tail
}

// answers reports whether a Redis server answers PING on addr within a
// moment, and if not, why not. It dials itself, so a missing server costs no
// client pool.
func answers(ctx context.Context, addr string) (bool, string) {
	d := net.Dialer{Timeout: 300 * time.Millisecond}
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return false, "nothing answers on " + addr
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(500 * time.Millisecond))
	if _, err := io.WriteString(conn, "*1\r\n$4\r\nPING\r\n"); err != nil {
		return false, "nothing answers on " + addr
	}
	line, err := bufio.NewReader(conn).ReadString('\n')
	switch {
	case line == "+PONG\r\n":
		return true, ""
	case strings.HasPrefix(line, "-NOAUTH"):
		// A Redis, but one we cannot use without the URL's password.
		return false, fmt.Sprintf("the Redis on %s wants a password (give -redis redis://:PASSWORD@%s)", addr, addr)
	case err != nil:
		return false, fmt.Sprintf("no Redis answers PING on %s", addr)
	}
	return false, fmt.Sprintf("%s does not answer PING like a Redis (%q)", addr, strings.TrimSpace(line))
}
