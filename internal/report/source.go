package report

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/xrdmon/xrdmon/internal/record"
	"github.com/xrdmon/xrdmon/internal/store"
)

// pageSize is the records read per page.
const pageSize = 5000

// StoreSource reads a local store (store.Reader: safe while a collector
// writes it).
type StoreSource struct{ R *store.Reader }

// Records implements Source.
func (s StoreSource) Records(ctx context.Context, q store.Query, fn func(*record.Record) error) error {
	q.Limit = pageSize
	for {
		recs, next, err := s.R.QueryPage(ctx, q)
		if err != nil {
			return fmt.Errorf("read store: %w", err)
		}
		for i := range recs {
			if err := fn(&recs[i]); err != nil {
				return err
			}
		}
		if next == nil {
			return nil
		}
		q.After = next
	}
}

// APISource reads a running collector's query API (/api/v1/records).
type APISource struct {
	// URL is the collector's address, e.g. http://127.0.0.1:9939.
	URL string
	// Token is the bearer token (http.api_token_file), if the API has one.
	Token  string
	Client *http.Client
}

// Records implements Source.
func (s APISource) Records(ctx context.Context, q store.Query, fn func(*record.Record) error) error {
	base, err := url.Parse(strings.TrimRight(s.URL, "/") + "/api/v1/records")
	if err != nil {
		return fmt.Errorf("collector url: %w", err)
	}
	v := url.Values{}
	set := func(k, val string) {
		if val != "" {
			v.Set(k, val)
		}
	}
	if !q.From.IsZero() {
		v.Set("from", q.From.UTC().Format(time.RFC3339Nano))
	}
	if !q.To.IsZero() {
		v.Set("to", q.To.UTC().Format(time.RFC3339Nano))
	}
	set("server", q.Server)
	set("site", q.Site)
	set("user", q.User)
	set("path_prefix", q.PathPrefix)
	set("reason", string(q.Reason))
	if q.Partial {
		v.Set("partial", "true")
	}
	v.Set("order", "oldest")
	if q.Newest {
		v.Set("order", "newest")
	}
	v.Set("limit", fmt.Sprint(pageSize))
	for {
		base.RawQuery = v.Encode()
		var page recordPage
		if _, err := s.getJSON(ctx, base.String(), &page); err != nil {
			return err
		}
		for _, raw := range page.Records {
			var r record.Record
			if err := json.Unmarshal(raw, &r); err != nil {
				return fmt.Errorf("decode record from %s: %w", s.URL, err)
			}
			if err := fn(&r); err != nil {
				return err
			}
		}
		if page.Next == "" {
			return nil
		}
		v.Set("cursor", page.Next)
	}
}

type recordPage struct {
	Records []json.RawMessage `json:"records"`
	Next    string            `json:"next"`
}

// getJSON asks the collector for u and decodes its JSON answer into v.
// It returns the answer's HTTP status (0 when there was none).
func (s APISource) getJSON(ctx context.Context, u string, v any) (int, error) {
	client := s.Client
	if client == nil {
		client = &http.Client{Timeout: time.Minute}
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return 0, err
	}
	if s.Token != "" {
		req.Header.Set("Authorization", "Bearer "+s.Token)
	}
	resp, err := client.Do(req)
	// The collector serves a few queries at once and answers the rest 503
	// with Retry-After: wait and ask again, a few times.
	for i := 0; err == nil && resp.StatusCode == http.StatusServiceUnavailable && resp.Header.Get("Retry-After") != "" && i < 5; i++ {
		resp.Body.Close()
		wait, _ := strconv.Atoi(resp.Header.Get("Retry-After"))
		select {
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-time.After(time.Duration(min(max(wait, 1), 10)) * time.Second):
		}
		resp, err = client.Do(req)
	}
	if err != nil {
		return 0, fmt.Errorf("query collector: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return resp.StatusCode, fmt.Errorf("query collector: %s: %s", resp.Status, strings.TrimSpace(string(b)))
	}
	if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
		return resp.StatusCode, fmt.Errorf("decode collector answer: %w", err)
	}
	return resp.StatusCode, nil
}
