package config

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"reflect"
	"sort"
	"strconv"
	"strings"

	"github.com/xrdmon/xrdmon/internal/confcheck"
	"github.com/xrdmon/xrdmon/internal/units"
	"go.yaml.in/yaml/v3"
)

// EnvPrefix starts every environment variable that overrides a key.
const EnvPrefix = "XRDMON_"

// Error lists every problem found while loading or validating a
// configuration. Each problem names its key.
type Error = confcheck.Error

// field is one leaf key of Config, found by reflection.
type field struct {
	key    string // "listen.rcvbuf"
	env    string // "XRDMON_LISTEN_RCVBUF"
	help   string
	secret bool
	index  []int // reflect field index path from Config
}

var fields = collectFields()

func collectFields() []field {
	var out []field
	var walk func(t reflect.Type, prefix string, index []int)
	walk = func(t reflect.Type, prefix string, index []int) {
		for i := 0; i < t.NumField(); i++ {
			sf := t.Field(i)
			name := yamlName(sf)
			if name == "" {
				continue
			}
			key := name
			if prefix != "" {
				key = prefix + "." + name
			}
			idx := append(append([]int(nil), index...), i)
			if inline(sf) { // its keys are the parent's
				walk(sf.Type, prefix, idx)
				continue
			}
			if sf.Type.Kind() == reflect.Struct {
				walk(sf.Type, key, idx)
				continue
			}
			out = append(out, field{
				key:    key,
				env:    EnvPrefix + strings.ToUpper(strings.ReplaceAll(key, ".", "_")),
				help:   sf.Tag.Get("help"),
				secret: sf.Tag.Get("secret") != "",
				index:  idx,
			})
		}
	}
	walk(reflect.TypeFor[Config](), "", nil)
	return out
}

// inline reports whether sf is an embedded struct whose keys are its
// parent's (yaml:",inline").
func inline(sf reflect.StructField) bool {
	_, opts, _ := strings.Cut(sf.Tag.Get("yaml"), ",")
	return sf.Anonymous && sf.Type.Kind() == reflect.Struct && strings.Contains(opts, "inline")
}

func yamlName(sf reflect.StructField) string {
	tag := sf.Tag.Get("yaml")
	name, _, _ := strings.Cut(tag, ",")
	if name == "-" || !sf.IsExported() {
		return ""
	}
	if name == "" {
		name = strings.ToLower(sf.Name)
	}
	return name
}

// Keys returns every leaf key ("listen.udp", ...) in declaration order.
func Keys() []string {
	out := make([]string, len(fields))
	for i, f := range fields {
		out[i] = f.key
	}
	return out
}

// EnvName returns the environment variable that overrides key, or "" if
// key is not a leaf key.
func EnvName(key string) string {
	for _, f := range fields {
		if f.key == key {
			return f.env
		}
	}
	return ""
}

// Overrides collects --section.key flag values from a command line. Make it
// with RegisterFlags and pass it to Load after parsing the flags.
type Overrides struct {
	set []override
}

type override struct {
	key, value string
}

// Set records an override as if --key=value had been given. It fails for a
// key that does not exist.
func (o *Overrides) Set(key, value string) error {
	for _, f := range fields {
		if f.key == key {
			o.set = append(o.set, override{key, value})
			return nil
		}
	}
	return fmt.Errorf("unknown key %q", key)
}

// flagValue is the flag.Value for one key. It only records the text; Load
// parses it, so flags take precedence over the file and env.
type flagValue struct {
	o      *Overrides
	key    string
	isBool bool
	def    string
}

func (v *flagValue) String() string {
	if v == nil {
		return ""
	}
	return v.def
}
func (v *flagValue) Set(s string) error {
	v.o.set = append(v.o.set, override{v.key, s})
	return nil
}
func (v *flagValue) IsBoolFlag() bool { return v.isBool }

// RegisterFlags defines a flag --section.key on fs for every key, with the
// key's help text and default. The values given on the command line are
// collected in the returned Overrides.
func RegisterFlags(fs *flag.FlagSet) *Overrides {
	o := &Overrides{}
	def := reflect.ValueOf(Default()).Elem()
	for _, f := range fields {
		fv := def.FieldByIndex(f.index)
		help := f.help
		if help == "" {
			help = "see xrdmon.example.yaml"
		}
		help += " (env " + f.env + ")"
		fs.Var(&flagValue{o: o, key: f.key, isBool: fv.Kind() == reflect.Bool, def: formatValue(fv)}, f.key, help)
	}
	return o
}

// Load builds the configuration: defaults, then the YAML file at path (if
// path is not empty), then XRDMON_* variables from env (in os.Environ form),
// then the overrides from the command line (may be nil). The result is
// validated; the error is an *Error listing every problem, each naming its
// key.
func Load(path string, env []string, ov *Overrides) (*Config, error) {
	c := Default()
	if path != "" {
		data, err := os.ReadFile(path)
		if err != nil {
			return nil, fmt.Errorf("read config: %w", err)
		}
		if err := c.decodeYAML(data); err != nil {
			var ce *Error
			if errors.As(err, &ce) {
				for i, p := range ce.Problems {
					ce.Problems[i] = path + ": " + p
				}
			}
			return nil, err
		}
	}
	var problems []string
	problems = append(problems, c.applyEnv(env)...)
	if ov != nil {
		for _, s := range ov.set {
			if err := c.setKey(s.key, s.value); err != nil {
				problems = append(problems, "--"+s.key+": "+err.Error())
			}
		}
	}
	if len(problems) > 0 {
		return nil, &Error{Problems: problems}
	}
	if err := c.Validate(); err != nil {
		return nil, err
	}
	return c, nil
}

// Parse decodes YAML data over the defaults, strictly, without env, flags or
// validation. Unknown keys and values of the wrong type are errors naming
// the key.
func Parse(data []byte) (*Config, error) {
	c := Default()
	if err := c.decodeYAML(data); err != nil {
		return nil, err
	}
	return c, nil
}

// UnknownEnv returns the XRDMON_* variables in env that name no key, so the
// caller can warn about typos. Variables used by tests (XRDMON_TEST_*) and
// XRDMON_CONFIG are not reported.
func UnknownEnv(env []string) []string {
	known := make(map[string]bool, len(fields))
	for _, f := range fields {
		known[f.env] = true
	}
	var out []string
	for _, kv := range env {
		name, _, _ := strings.Cut(kv, "=")
		if strings.HasPrefix(name, EnvPrefix) && !known[name] &&
			!strings.HasPrefix(name, EnvPrefix+"TEST_") && name != EnvPrefix+"CONFIG" {
			out = append(out, name)
		}
	}
	sort.Strings(out)
	return out
}

func (c *Config) applyEnv(env []string) []string {
	vals := make(map[string]string)
	for _, kv := range env {
		name, val, ok := strings.Cut(kv, "=")
		if ok && strings.HasPrefix(name, EnvPrefix) {
			vals[name] = val
		}
	}
	var problems []string
	for _, f := range fields {
		v, ok := vals[f.env]
		if !ok {
			continue
		}
		if err := c.setKey(f.key, v); err != nil {
			problems = append(problems, f.env+" ("+f.key+"): "+err.Error())
		}
	}
	return problems
}

// setKey parses s into the leaf key.
func (c *Config) setKey(key, s string) error {
	for _, f := range fields {
		if f.key == key {
			return setFromString(reflect.ValueOf(c).Elem().FieldByIndex(f.index), s)
		}
	}
	return fmt.Errorf("unknown key %q", key)
}

var (
	durationType = reflect.TypeFor[units.Duration]()
	byteSizeType = reflect.TypeFor[units.ByteSize]()
)

func setFromString(v reflect.Value, s string) error {
	switch v.Type() {
	case durationType:
		return setParsed(v, s, units.ParseDuration)
	case byteSizeType:
		return setParsed(v, s, units.ParseByteSize)
	}
	switch v.Kind() {
	case reflect.String:
		v.SetString(s)
	case reflect.Bool:
		b, err := strconv.ParseBool(strings.TrimSpace(s))
		if err != nil {
			return fmt.Errorf("invalid boolean %q", s)
		}
		v.SetBool(b)
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		n, err := strconv.ParseInt(strings.TrimSpace(s), 10, v.Type().Bits())
		if err != nil {
			return fmt.Errorf("invalid integer %q", s)
		}
		v.SetInt(n)
	case reflect.Slice:
		if v.Type().Elem().Kind() != reflect.String {
			return fmt.Errorf("unsupported type %s", v.Type())
		}
		var items []string
		for _, it := range strings.Split(s, ",") {
			if it = strings.TrimSpace(it); it != "" {
				items = append(items, it)
			}
		}
		v.Set(reflect.ValueOf(items))
	case reflect.Map:
		if v.Type().Key().Kind() != reflect.String || v.Type().Elem().Kind() != reflect.String {
			return fmt.Errorf("unsupported type %s", v.Type())
		}
		m := map[string]string{}
		for _, it := range strings.Split(s, ",") {
			if it = strings.TrimSpace(it); it == "" {
				continue
			}
			k, val, ok := strings.Cut(it, "=")
			if !ok {
				return fmt.Errorf("invalid map entry %q, want key=value", it)
			}
			m[strings.TrimSpace(k)] = strings.TrimSpace(val)
		}
		v.Set(reflect.ValueOf(m))
	default:
		return fmt.Errorf("unsupported type %s", v.Type())
	}
	return nil
}

// setParsed sets the integer v to what parse makes of s.
func setParsed[T ~int64](v reflect.Value, s string, parse func(string) (T, error)) error {
	n, err := parse(s)
	if err != nil {
		return err
	}
	v.SetInt(int64(n))
	return nil
}

func formatValue(v reflect.Value) string {
	switch v.Type() {
	case durationType:
		return units.Duration(v.Int()).String()
	case byteSizeType:
		return units.ByteSize(v.Int()).String()
	}
	switch v.Kind() {
	case reflect.Slice:
		parts := make([]string, v.Len())
		for i := range parts {
			parts[i] = v.Index(i).String()
		}
		return strings.Join(parts, ",")
	case reflect.Map:
		keys := make([]string, 0, v.Len())
		for _, k := range v.MapKeys() {
			keys = append(keys, k.String())
		}
		sort.Strings(keys)
		parts := make([]string, len(keys))
		for i, k := range keys {
			parts[i] = k + "=" + v.MapIndex(reflect.ValueOf(k)).String()
		}
		return strings.Join(parts, ",")
	}
	return fmt.Sprint(v.Interface())
}

// decodeYAML decodes data over c, key by key, so that every problem (an
// unknown key, a duplicate key, a value of the wrong type) is reported with
// its full key and line.
func (c *Config) decodeYAML(data []byte) error {
	var doc yaml.Node
	dec := yaml.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			return nil // empty file: defaults
		}
		return &Error{Problems: []string{"parse yaml: " + err.Error()}}
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); err == nil {
		return &Error{Problems: []string{"parse yaml: more than one document"}}
	}
	if len(doc.Content) == 0 {
		return nil
	}
	var problems []string
	decodeNode(doc.Content[0], reflect.ValueOf(c).Elem(), "", &problems)
	if len(problems) > 0 {
		return &Error{Problems: problems}
	}
	return nil
}

func decodeNode(n *yaml.Node, v reflect.Value, prefix string, problems *[]string) {
	for n.Kind == yaml.AliasNode {
		n = n.Alias
	}
	where := func(key string, line int) string {
		if key == "" {
			return fmt.Sprintf("line %d", line)
		}
		return fmt.Sprintf("%s (line %d)", key, line)
	}
	if v.Kind() != reflect.Struct {
		if n.Tag == "!!null" {
			return // "key:" with no value keeps the default
		}
		if err := n.Decode(v.Addr().Interface()); err != nil {
			*problems = append(*problems, where(prefix, n.Line)+": "+cleanYAMLError(err))
		}
		return
	}
	if n.Tag == "!!null" {
		return
	}
	if n.Kind != yaml.MappingNode {
		*problems = append(*problems, where(prefix, n.Line)+": expected a mapping of keys")
		return
	}
	byName := make(map[string][]int)
	var names func(t reflect.Type, index []int)
	names = func(t reflect.Type, index []int) {
		for i := 0; i < t.NumField(); i++ {
			sf := t.Field(i)
			idx := append(append([]int(nil), index...), i)
			if inline(sf) {
				names(sf.Type, idx)
			} else if name := yamlName(sf); name != "" {
				byName[name] = idx
			}
		}
	}
	names(v.Type(), nil)
	seen := make(map[string]bool, len(n.Content)/2)
	for i := 0; i+1 < len(n.Content); i += 2 {
		kn, vn := n.Content[i], n.Content[i+1]
		key := kn.Value
		full := key
		if prefix != "" {
			full = prefix + "." + key
		}
		if seen[key] {
			*problems = append(*problems, where(full, kn.Line)+": duplicate key")
			continue
		}
		seen[key] = true
		idx, ok := byName[key]
		if !ok {
			*problems = append(*problems, where(full, kn.Line)+": unknown key"+suggest(key, byName))
			continue
		}
		decodeNode(vn, v.FieldByIndex(idx), full, problems)
	}
}

// cleanYAMLError drops yaml.v3's "yaml: unmarshal errors:\n  line N: "
// wrapping, since the caller already names the key and line.
func cleanYAMLError(err error) string {
	var te *yaml.TypeError
	if errors.As(err, &te) && len(te.Errors) > 0 {
		msgs := make([]string, len(te.Errors))
		for i, m := range te.Errors {
			if _, rest, ok := strings.Cut(m, ": "); ok && strings.HasPrefix(m, "line ") {
				m = rest
			}
			msgs[i] = m
		}
		return strings.Join(msgs, "; ")
	}
	return err.Error()
}

// suggest returns a hint naming the closest known key, if one is close.
func suggest(key string, known map[string][]int) string {
	best, bestD := "", 3
	for k := range known {
		if d := EditDistance(key, k); d < bestD || (d == bestD && best != "" && k < best) {
			best, bestD = k, d
		}
	}
	if best == "" {
		names := make([]string, 0, len(known))
		for k := range known {
			names = append(names, k)
		}
		sort.Strings(names)
		return " (known: " + strings.Join(names, ", ") + ")"
	}
	return fmt.Sprintf(" (did you mean %q?)", best)
}

// EditDistance is the Levenshtein distance of a and b (the suggestions
// for a misspelt key or flag).
func EditDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

func reflectValue(c *Config) reflect.Value { return reflect.ValueOf(c).Elem() }
