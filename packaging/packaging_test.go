package packaging

import (
	"bufio"
	"context"
	"debug/elf"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gatectl/gatectl/internal/fakeprovider"
	"github.com/gatectl/gatectl/server"
	"github.com/gatectl/gatectl/snapshot"
)

const repoRoot = ".."

// instruction is one Dockerfile instruction, continuation lines joined.
type instruction struct {
	cmd, args string
	line      int
}

func readDockerfile(t *testing.T) [][]instruction {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(repoRoot, "Dockerfile"))
	if err != nil {
		t.Fatal(err)
	}
	var stages [][]instruction
	var cur strings.Builder
	start := 0
	for i, line := range strings.Split(string(b), "\n") {
		trimmed := strings.TrimSpace(line)
		if cur.Len() == 0 && (trimmed == "" || strings.HasPrefix(trimmed, "#")) {
			continue
		}
		if cur.Len() == 0 {
			start = i + 1
		}
		if strings.HasSuffix(trimmed, "\\") {
			cur.WriteString(strings.TrimSuffix(trimmed, "\\") + " ")
			continue
		}
		cur.WriteString(trimmed)
		cmd, args, _ := strings.Cut(cur.String(), " ")
		cur.Reset()
		in := instruction{strings.ToUpper(cmd), strings.TrimSpace(args), start}
		if in.cmd == "FROM" {
			stages = append(stages, nil)
		}
		if len(stages) == 0 {
			t.Fatalf("Dockerfile:%d: %s before the first FROM", in.line, in.cmd)
		}
		stages[len(stages)-1] = append(stages[len(stages)-1], in)
	}
	return stages
}

func find(stage []instruction, cmd string) []instruction {
	var out []instruction
	for _, in := range stage {
		if in.cmd == cmd {
			out = append(out, in)
		}
	}
	return out
}

// The Dockerfile is multi-stage: a Go build stage whose toolchain is the one
// go.mod asks, building ./cmd/gatectl with CGO_ENABLED=0, and a final stage on
// distroless/static (or scratch) that copies only the binary and runs it as a
// non-root user.
func TestDockerfileEssentials(t *testing.T) {
	stages := readDockerfile(t)
	if len(stages) < 2 {
		t.Fatalf("%d stages: want a build stage and a final one", len(stages))
	}
	build, final := stages[0], stages[len(stages)-1]

	from := strings.Fields(build[0].args)
	if len(from) != 3 || !strings.EqualFold(from[1], "AS") || !strings.HasPrefix(from[0], "golang:") {
		t.Fatalf("build stage: FROM %s; want FROM golang:<version> AS <name>", build[0].args)
	}
	gomod, err := os.ReadFile(filepath.Join(repoRoot, "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	goVersion := regexp.MustCompile(`(?m)^go (\d+\.\d+)`).FindStringSubmatch(string(gomod))
	if goVersion == nil || !strings.HasPrefix(strings.TrimPrefix(from[0], "golang:"), goVersion[1]) {
		t.Errorf("build stage uses %s; go.mod asks for go %v", from[0], goVersion)
	}
	buildName := from[2]
	var built bool
	for _, run := range find(build, "RUN") {
		if strings.Contains(run.args, "go build") && strings.Contains(run.args, "CGO_ENABLED=0") && strings.Contains(run.args, "./cmd/gatectl") {
			built = true
		}
	}
	if !built {
		t.Error("build stage: no RUN CGO_ENABLED=0 go build … ./cmd/gatectl")
	}

	base := strings.Fields(final[0].args)[0]
	if base != "scratch" && !strings.HasPrefix(base, "gcr.io/distroless/static") {
		t.Errorf("final stage FROM %s: want distroless/static or scratch", base)
	}
	copies := find(final, "COPY")
	if len(copies) == 0 {
		t.Error("final stage copies nothing")
	}
	for _, c := range copies {
		if !strings.Contains(c.args, "--from="+buildName) {
			t.Errorf("Dockerfile:%d: the final stage copies from the build context (%s), not from the build stage", c.line, c.args)
		}
	}
	users := find(final, "USER")
	if len(users) == 0 {
		t.Fatal("final stage: no USER: the image would run as root")
	}
	user, _, _ := strings.Cut(users[len(users)-1].args, ":")
	if user == "root" || user == "0" || user == "" {
		t.Errorf("final stage runs as USER %s", users[len(users)-1].args)
	}
	entry := find(final, "ENTRYPOINT")
	if len(entry) == 0 || !strings.Contains(entry[0].args, "gatectl") {
		t.Error("final stage: no ENTRYPOINT running gatectl")
	}
}

// serveFlagsIn returns the --flags of the `serve` command line in args.
func serveFlagsIn(args []string) []string {
	var out []string
	for _, a := range args {
		if strings.HasPrefix(a, "--") {
			name, _, _ := strings.Cut(a, "=")
			out = append(out, name)
		}
	}
	return out
}

func dockerCmd(t *testing.T) []string {
	t.Helper()
	stages := readDockerfile(t)
	cmds := find(stages[len(stages)-1], "CMD")
	if len(cmds) == 0 {
		t.Fatal("final stage: no CMD")
	}
	var args []string
	if err := json.Unmarshal([]byte(cmds[len(cmds)-1].args), &args); err != nil {
		t.Fatalf("CMD %s: want the JSON (exec) form: %v", cmds[len(cmds)-1].args, err)
	}
	return args
}

// readUnit parses packaging/gatectl.service into section -> key -> values.
func readUnit(t *testing.T) map[string]map[string][]string {
	t.Helper()
	f, err := os.Open("gatectl.service")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	unit := map[string]map[string][]string{}
	section := ""
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		switch {
		case line == "" || strings.HasPrefix(line, "#") || strings.HasPrefix(line, ";"):
		case strings.HasPrefix(line, "[") && strings.HasSuffix(line, "]"):
			section = line[1 : len(line)-1]
			unit[section] = map[string][]string{}
		default:
			k, v, ok := strings.Cut(line, "=")
			if !ok || section == "" {
				t.Fatalf("gatectl.service:%d: %q is not key=value in a section", n, line)
			}
			unit[section][k] = append(unit[section][k], v)
		}
	}
	return unit
}

// The unit runs serve as a dynamic user with its state in StateDirectory, and
// is hardened.
func TestSystemdUnitEssentials(t *testing.T) {
	u := readUnit(t)
	svc := u["Service"]
	if svc == nil || u["Unit"] == nil || u["Install"] == nil {
		t.Fatalf("sections: want Unit, Service and Install: %v", u)
	}
	for k, want := range map[string]string{
		"DynamicUser": "yes", "NoNewPrivileges": "yes", "StateDirectory": "gatectl", "ProtectSystem": "strict",
		"ProtectHome": "yes", "PrivateTmp": "yes", "CapabilityBoundingSet": "", "RestrictSUIDSGID": "yes",
	} {
		if got := svc[k]; len(got) != 1 || got[0] != want {
			t.Errorf("[Service] %s = %q, want %q", k, got, want)
		}
	}
	exec := strings.Fields(svc["ExecStart"][0])
	if len(exec) < 2 || filepath.Base(exec[0]) != "gatectl" || exec[1] != "serve" {
		t.Fatalf("ExecStart %q: want gatectl serve …", exec)
	}
	if i := slices.Index(exec, "--state-dir"); i < 0 || i+1 >= len(exec) || exec[i+1] != "/var/lib/"+svc["StateDirectory"][0] {
		t.Errorf("ExecStart %q: --state-dir should be /var/lib/%s, the StateDirectory", exec, svc["StateDirectory"][0])
	}
	if got := svc["ExecReload"]; len(got) != 1 || !strings.Contains(got[0], "-HUP") {
		t.Errorf("ExecReload = %q: serve reloads on SIGHUP", got)
	}
}

// CGO_ENABLED=0 builds a static binary (no interpreter, no shared library), as
// the Dockerfile's final stage needs; the flags the unit and the image pass to
// serve are flags serve has.
func TestStaticBuildAndServeFlags(t *testing.T) {
	if testing.Short() {
		t.Skip("builds gatectl")
	}
	bin := filepath.Join(t.TempDir(), "gatectl")
	cmd := exec.Command("go", "build", "-trimpath", "-o", bin, "./cmd/gatectl")
	cmd.Dir = repoRoot
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("CGO_ENABLED=0 go build: %v\n%s", err, out)
	}
	if runtime.GOOS == "linux" {
		f, err := elf.Open(bin)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		for _, p := range f.Progs {
			if p.Type == elf.PT_INTERP {
				t.Error("the binary names a dynamic loader (PT_INTERP): not static")
			}
		}
		if libs, _ := f.ImportedLibraries(); len(libs) > 0 {
			t.Errorf("the binary needs shared libraries: %v", libs)
		}
	}
	help, err := exec.Command(bin, "serve", "--help").CombinedOutput()
	if err != nil {
		t.Fatalf("gatectl serve --help: %v\n%s", err, help)
	}
	unitArgs := strings.Fields(readUnit(t)["Service"]["ExecStart"][0])
	for _, f := range append(serveFlagsIn(unitArgs), serveFlagsIn(dockerCmd(t))...) {
		if !strings.Contains(string(help), f+" ") && !strings.Contains(string(help), f+"=") {
			t.Errorf("serve has no flag %s (used by the unit or the image)\n%s", f, help)
		}
	}
	if args := dockerCmd(t); args[0] != "serve" {
		t.Errorf("the image's CMD runs %q, want serve", args[0])
	}
}

// dashboardQueries returns every PromQL query in the dashboard: panel targets'
// expr and the template variables' queries.
func dashboardQueries(t *testing.T) []string {
	t.Helper()
	b, err := os.ReadFile("grafana-dashboard.json")
	if err != nil {
		t.Fatal(err)
	}
	var d any
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatalf("grafana-dashboard.json: %v", err)
	}
	var out []string
	var walk func(v any, key string)
	walk = func(v any, key string) {
		switch x := v.(type) {
		case map[string]any:
			for k, c := range x {
				walk(c, k)
			}
		case []any:
			for _, c := range x {
				walk(c, key)
			}
		case string:
			if key == "expr" || key == "definition" || key == "query" {
				out = append(out, x)
			}
		}
	}
	walk(d, "")
	return out
}

// metricNameRe finds metric names in PromQL: gatectl's own, and the process and
// Go runtime collectors' it registers.
var metricNameRe = regexp.MustCompile(`\b(?:gatectl|process|go)_[a-z0-9_]+\b`)

// Every metric the dashboard plots is one a real gatectl serves: a server in
// front of a fake provider with a small hidden limit takes traffic (429s
// included, so the failure and retry counters exist), reloads its config once,
// and its /metrics is scraped.
func TestGrafanaDashboardMetricsExist(t *testing.T) {
	queries := dashboardQueries(t)
	var names []string
	for _, q := range queries {
		for _, n := range metricNameRe.FindAllString(q, -1) {
			if !slices.Contains(names, n) {
				names = append(names, n)
			}
		}
	}
	if len(names) < 10 {
		t.Fatalf("only %d metric names found in the dashboard's %d queries: %v", len(names), len(queries), names)
	}
	served := scrapeAfterTraffic(t)
	for _, n := range names {
		if !served[n] {
			t.Errorf("the dashboard uses %s, which gatectl's /metrics does not serve", n)
		}
	}
	t.Logf("%d metric names in the dashboard, all served: %v", len(names), names)
}

func scrapeAfterTraffic(t *testing.T) map[string]bool {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()

	prov := fakeprovider.New(fakeprovider.Config{Tokens: 3000, Window: 2 * time.Second, RetryAfter: time.Second, OutputMedian: 50})
	up := &http.Server{Handler: prov, ReadHeaderTimeout: 5 * time.Second}
	upLn, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = up.Serve(upLn) }()
	defer up.Close()

	dir := t.TempDir()
	path := filepath.Join(dir, "gatectl.yaml")
	cfg := fmt.Sprintf("stateDir: state\nproviders:\n  fake: {kind: openai, baseURL: \"http://%s/v1\"}\ngate:\n  window: 2s\n  defaults: {tpm: 30000, rpm: 100000}\n", upLn.Addr())
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	m, err := snapshot.NewManager(ctx, path, snapshot.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	srv, err := server.New(server.Options{Manager: m, ShutdownGrace: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	sctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- srv.Serve(sctx, ln) }()
	defer func() { stop(); <-done }()
	base := "http://" + ln.Addr().String()

	// 12 calls of about 250 tokens at once: 3,000 tokens fit in the hidden
	// window, so the gate (starting at ten times that) meets 429s and learns.
	body := `{"model":"fake/m","max_tokens":60,"messages":[{"role":"user","content":"` + strings.Repeat("word ", 150) + `"}]}`
	var wg sync.WaitGroup
	for i := range 12 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			req, _ := http.NewRequestWithContext(ctx, http.MethodPost, base+"/v1/chat/completions", strings.NewReader(body))
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("X-Gate-Session", fmt.Sprintf("s%d", i))
			if resp, err := http.DefaultClient.Do(req); err == nil {
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
		}()
	}
	wg.Wait()
	if prov.Stats().Refused == 0 {
		t.Fatal("the provider answered no 429: the traffic did not exercise the failure metrics")
	}
	if err := m.Reload(ctx); err != nil {
		t.Fatal(err)
	}

	resp, err := http.Get(base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	served := map[string]bool{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		name := line
		if i := strings.IndexAny(line, "{ "); i >= 0 {
			name = line[:i]
		}
		served[name] = true
	}
	return served
}
