package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"regexp"
	"strings"

	"github.com/spf13/pflag"
	"go.yaml.in/yaml/v3"

	"github.com/pdrouter/pdrouter/router"
)

// settingsFile is a YAML or JSON settings file as read: its path, and the line of each
// top-level key, so an error about a value from the file can say FILE:LINE rather than
// naming a flag the user never typed.
type settingsFile struct {
	flag  string // the flag that named the file: --config, --cluster
	path  string
	lines map[string]int
}

// readSettingsFile reads path as YAML (JSON is YAML) into a generic document, recording the
// line of each top-level key. A nil document means the file is empty.
func readSettingsFile(flag, path string) (map[string]any, settingsFile, error) {
	f := settingsFile{flag: flag, path: path, lines: map[string]int{}}
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, f, fmt.Errorf("%s: %w", flag, err)
	}
	var root yaml.Node
	if err := yaml.Unmarshal(raw, &root); err != nil {
		return nil, f, fmt.Errorf("%s %s: %w", flag, path, err)
	}
	if len(root.Content) == 0 {
		return nil, f, nil
	}
	top := root.Content[0]
	if top.Kind != yaml.MappingNode {
		return nil, f, fmt.Errorf("%s:%d: want a mapping of settings (key: value), got a %s", path, top.Line, kindName(top.Kind))
	}
	for i := 0; i+1 < len(top.Content); i += 2 {
		f.lines[top.Content[i].Value] = top.Content[i].Line
	}
	var doc map[string]any
	if err := top.Decode(&doc); err != nil {
		return nil, f, fmt.Errorf("%s %s: %w", flag, path, err)
	}
	return doc, f, nil
}

func kindName(k yaml.Kind) string {
	switch k {
	case yaml.SequenceNode:
		return "list"
	case yaml.ScalarNode:
		return "single value"
	}
	return "document"
}

// at is "PATH:LINE" for key, or the path alone when the key is not in the file.
func (f settingsFile) at(key string) string {
	if l, ok := f.lines[key]; ok {
		return fmt.Sprintf("%s:%d", f.path, l)
	}
	return f.path
}

var unknownFieldRE = regexp.MustCompile(`unknown field "([^"]+)"`)

// decode decodes doc strictly (unknown keys are errors) into dst, naming the file and line of
// the key at fault.
func (f settingsFile) decode(doc map[string]any, dst any) error {
	b, err := json.Marshal(doc)
	if err != nil {
		return fmt.Errorf("%s %s: %w", f.flag, f.path, err)
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	err = dec.Decode(dst)
	if err == nil {
		return nil
	}
	var typeErr *json.UnmarshalTypeError
	if errors.As(err, &typeErr) && typeErr.Field != "" {
		// The path starts with the embedded struct's name for an embedded setting
		// (server.Config's router.Config: "Config.cache_threshold"); keys are snake_case.
		field := strings.TrimPrefix(typeErr.Field, "Config.")
		key, _, _ := strings.Cut(field, ".")
		return fmt.Errorf("%s: %s: want %s, got %s", f.at(key), field, typeErr.Type, typeErr.Value)
	}
	if m := unknownFieldRE.FindStringSubmatch(err.Error()); m != nil {
		return fmt.Errorf("%s: unknown key %q (see %s's settings in --help)", f.at(m[1]), m[1], f.flag)
	}
	return fmt.Errorf("%s %s: %w", f.flag, f.path, err)
}

// explain rewrites a *router.SettingError about a value that came from the file (the flag was
// not given) to name the file and line: "router.yaml:3: cache_threshold 1.7 is outside [0,1]".
// Other errors, and values given by flag, pass unchanged.
func (f settingsFile) explain(err error, fs *pflag.FlagSet) error {
	var se *router.SettingError
	if f.path == "" || !errors.As(err, &se) {
		return err
	}
	if _, inFile := f.lines[se.Key]; !inFile || fs.Changed(flagName(se.Key)) {
		return err
	}
	msg := strings.TrimPrefix(se.Msg, "--"+flagName(se.Key))
	return fmt.Errorf("%s: %s%s", f.at(se.Key), se.Key, msg)
}
