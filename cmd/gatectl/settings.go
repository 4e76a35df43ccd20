package main

import (
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/urfave/cli/v2"
	"gopkg.in/yaml.v3"

	"github.com/gatectl/gatectl/config"
	"github.com/gatectl/gatectl/server"
)

func settingsCommand() *cli.Command {
	format := &cli.StringFlag{Name: "format", Value: "text", Usage: "output `FORMAT`: text or json"}
	return &cli.Command{
		Name:  "settings",
		Usage: "read and change the gate, retry and quota settings of a running server",
		Description: "The sections gate, retry and quota of a running server can be changed without editing\n" +
			"its config file (GET/PUT /gate/v1/settings/{section}). A change takes the section's own\n" +
			"YAML keys, is checked exactly as the file is, applies to the next decision and is kept in\n" +
			"the state file across restarts. The file still wins for the keys it changes: when an edit\n" +
			"of the file (or the file at the next start) gives a key another value than it had when the\n" +
			"runtime setting was made, the runtime setting is dropped. docs/steering.md has the rules.",
		Subcommands: []*cli.Command{
			{
				Name:      "get",
				Usage:     "show the settings in force: every section, or one",
				ArgsUsage: "[SECTION]",
				Flags:     []cli.Flag{addrFlag("server `URL`"), format},
				Action: func(c *cli.Context) error {
					args, err := settingsArgs(c)
					if err != nil {
						return err
					}
					if err := settingsFormat(c); err != nil {
						return err
					}
					secs := config.RuntimeSections
					switch len(args) {
					case 0:
						if c.String("format") == "json" {
							var all map[string]any
							if err := apiGet(c.Context, c.String("addr"), "/gate/v1/settings", &all); err != nil {
								return cli.Exit("settings get: "+err.Error(), exitFailure)
							}
							return writeJSONOut(c.App.Writer, all)
						}
					case 1:
						sec, err := settingsSectionArg(args[0])
						if err != nil {
							return err
						}
						secs = []string{sec}
					default:
						return cli.Exit(fmt.Sprintf("settings get: at most one SECTION (got %q)", args), exitUsage)
					}
					for i, sec := range secs {
						var v server.APISettingsSection
						if err := apiGet(c.Context, c.String("addr"), "/gate/v1/settings/"+sec, &v); err != nil {
							return cli.Exit("settings get: "+err.Error(), exitFailure)
						}
						if c.String("format") == "json" {
							return writeJSONOut(c.App.Writer, v)
						}
						if i > 0 {
							fmt.Fprintln(c.App.Writer)
						}
						if err := writeSettingsText(c.App.Writer, v); err != nil {
							return err
						}
					}
					return nil
				},
			},
			{
				Name:      "set",
				Usage:     "change keys of one section: gatectl settings set retry rounds=3 initialDelay=5s",
				ArgsUsage: "SECTION KEY=VALUE… | SECTION --json OBJECT",
				Description: "Each KEY is a key of the section as the YAML has it; a nested key is written with dots\n" +
					"(hintClamp.max=90s, mislabeled.rounds=2). Each VALUE is read as YAML reads it: 3, 0.5,\n" +
					"true, 5s, [RATE_LIMIT, SERVER], null. --json takes the whole partial object instead,\n" +
					"which is the way to name a model with dots: --json '{\"models\":{\"openai/gpt-4.1\":{\"tpm\":30000}}}'.",
				Flags: []cli.Flag{addrFlag("server `URL`"), format,
					&cli.StringFlag{Name: "json", Usage: "the partial section as one JSON `OBJECT`"}},
				Action: func(c *cli.Context) error {
					args, err := settingsArgs(c)
					if err != nil {
						return err
					}
					if err := settingsFormat(c); err != nil {
						return err
					}
					if len(args) == 0 {
						return cli.Exit("settings set: give SECTION and KEY=VALUE pairs, e.g. gatectl settings set retry rounds=3", exitUsage)
					}
					sec, err := settingsSectionArg(args[0])
					if err != nil {
						return err
					}
					body, err := settingsSetBody(args[1:], c.String("json"))
					if err != nil {
						return cli.Exit("settings set: "+err.Error(), exitUsage)
					}
					var v server.APISettingsSection
					if err := apiPut(c.Context, c.String("addr"), "/gate/v1/settings/"+sec, body, &v); err != nil {
						return cli.Exit("settings set: "+err.Error(), exitFailure)
					}
					if c.String("format") == "json" {
						return writeJSONOut(c.App.Writer, v)
					}
					return writeSettingsText(c.App.Writer, v)
				},
			},
			{
				Name:      "reset",
				Usage:     "drop every runtime setting of one section: the file's values apply again",
				ArgsUsage: "SECTION",
				Flags:     []cli.Flag{addrFlag("server `URL`"), format},
				Action: func(c *cli.Context) error {
					args, err := settingsArgs(c)
					if err != nil {
						return err
					}
					if err := settingsFormat(c); err != nil {
						return err
					}
					if len(args) != 1 {
						return cli.Exit("settings reset: give one SECTION: "+strings.Join(config.RuntimeSections, ", "), exitUsage)
					}
					sec, err := settingsSectionArg(args[0])
					if err != nil {
						return err
					}
					var v server.APISettingsSection
					if err := apiPost(c.Context, c.String("addr"), "/gate/v1/settings/"+sec+"/reset", &v); err != nil {
						return cli.Exit("settings reset: "+err.Error(), exitFailure)
					}
					if c.String("format") == "json" {
						return writeJSONOut(c.App.Writer, v)
					}
					return writeSettingsText(c.App.Writer, v)
				},
			},
		},
	}
}

// settingsArgs returns the positional arguments, applying the flags written
// among or after them (urfave/cli stops at the first argument: `settings set
// retry rounds=3 --addr URL` is how people write it). Every flag of these
// commands takes a value.
func settingsArgs(c *cli.Context) ([]string, error) {
	var pos []string
	args := c.Args().Slice()
	for i := 0; i < len(args); i++ {
		a := args[i]
		name, ok := strings.CutPrefix(a, "--")
		if !ok {
			name, ok = strings.CutPrefix(a, "-")
		}
		if !ok || name == "" || strings.Contains(a, "=") && !strings.HasPrefix(a, "-") {
			pos = append(pos, a)
			continue
		}
		name, val, hasVal := strings.Cut(name, "=")
		if !hasVal {
			if i+1 >= len(args) {
				return nil, cli.Exit(fmt.Sprintf("%s: flag --%s needs a value", c.Command.FullName(), name), exitUsage)
			}
			i++
			val = args[i]
		}
		if err := c.Set(name, val); err != nil {
			return nil, cli.Exit(fmt.Sprintf("%s: --%s: %v", c.Command.FullName(), name, err), exitUsage)
		}
	}
	return pos, nil
}

func settingsFormat(c *cli.Context) error {
	if f := c.String("format"); f != "text" && f != "json" {
		return cli.Exit(fmt.Sprintf("settings: --format must be text or json (got %q)", f), exitUsage)
	}
	return nil
}

func settingsSectionArg(s string) (string, error) {
	if !slices.Contains(config.RuntimeSections, s) {
		return "", cli.Exit(fmt.Sprintf("settings: unknown section %q (sections: %s)", s, strings.Join(config.RuntimeSections, ", ")), exitUsage)
	}
	return s, nil
}

// settingsSetBody builds the PUT body from KEY=VALUE pairs, or takes --json.
func settingsSetBody(pairs []string, jsonObj string) ([]byte, error) {
	if jsonObj != "" {
		if len(pairs) > 0 {
			return nil, fmt.Errorf("give KEY=VALUE pairs or --json, not both")
		}
		var obj map[string]any
		if err := json.Unmarshal([]byte(jsonObj), &obj); err != nil {
			return nil, fmt.Errorf("--json must be one JSON object: %v", err)
		}
		return []byte(jsonObj), nil
	}
	if len(pairs) == 0 {
		return nil, fmt.Errorf("give at least one KEY=VALUE (or --json)")
	}
	obj := map[string]any{}
	seen := map[string]bool{}
	for _, p := range pairs {
		key, val, ok := strings.Cut(p, "=")
		if !ok || key == "" {
			return nil, fmt.Errorf("%q is not KEY=VALUE", p)
		}
		// A key given twice, or beside one inside it (defaults=x defaults.tpm=5),
		// would lose one of them without a word, where the config file refuses
		// a duplicate key.
		for k := range seen {
			if k == key || strings.HasPrefix(key, k+".") || strings.HasPrefix(k, key+".") {
				return nil, fmt.Errorf("%s: given together with %s: set each key once", key, k)
			}
		}
		seen[key] = true
		var v any
		if err := yaml.Unmarshal([]byte(val), &v); err != nil {
			return nil, fmt.Errorf("%s: value %q: %v", key, val, err)
		}
		m := obj
		segs := strings.Split(key, ".")
		for _, seg := range segs[:len(segs)-1] {
			child, ok := m[seg].(map[string]any)
			if !ok {
				child = map[string]any{}
				m[seg] = child
			}
			m = child
		}
		m[segs[len(segs)-1]] = v
	}
	return json.Marshal(obj)
}

// writeSettingsText prints one key a line: its value in force and where it comes
// from: gatectl's default, the file (a value other than the default), or a
// runtime setting with the file's value beside it.
func writeSettingsText(w io.Writer, v server.APISettingsSection) error {
	eff, over, file, def := flatSettings(v.Effective), flatSettings(v.Overrides), flatSettings(v.File), flatSettings(v.Defaults)
	fmt.Fprintf(w, "%s (%d runtime setting(s))\n", v.Section, len(over))
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	for _, k := range slices.Sorted(maps.Keys(eff)) {
		src := "file"
		if d, ok := def[k]; ok && d == file[k] {
			src = "default"
		}
		if _, ok := over[k]; ok {
			fv, had := file[k]
			if !had {
				fv = "(not set)"
			}
			src = "runtime (file: " + fv + ")"
		}
		fmt.Fprintf(tw, "  %s.%s\t%s\t%s\n", v.Section, k, eff[k], src)
	}
	for _, warn := range v.Warnings {
		fmt.Fprintf(tw, "  warning: %s\n", warn)
	}
	return tw.Flush()
}

// flatSettings flattens a section object into dotted keys with YAML-like values.
func flatSettings(obj map[string]any) map[string]string {
	out := map[string]string{}
	var walk func(prefix string, v any)
	walk = func(prefix string, v any) {
		if m, ok := v.(map[string]any); ok && len(m) > 0 {
			for k, e := range m {
				walk(prefix+"."+k, e)
			}
			return
		}
		out[strings.TrimPrefix(prefix, ".")] = settingsValueText(v)
	}
	for k, v := range obj {
		walk("."+k, v)
	}
	return out
}

func settingsValueText(v any) string {
	switch x := v.(type) {
	case nil:
		return "null"
	case string:
		return x
	case []any:
		parts := make([]string, len(x))
		for i, e := range x {
			parts[i] = settingsValueText(e)
		}
		return "[" + strings.Join(parts, ", ") + "]"
	case map[string]any:
		return "{}"
	}
	b, _ := json.Marshal(v)
	return string(b)
}

func writeJSONOut(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}
