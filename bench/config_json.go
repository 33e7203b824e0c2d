package main

import (
	"encoding/json"
	"reflect"
	"time"
)

var durationType = reflect.TypeFor[time.Duration]()

// MarshalJSON writes durations as strings ("100ms"), other fields as numbers.
func (c Config) MarshalJSON() ([]byte, error) {
	m := map[string]any{}
	v := reflect.ValueOf(c)
	for i := range v.NumField() {
		f := v.Field(i)
		if f.Type() == durationType {
			m[v.Type().Field(i).Name] = time.Duration(f.Int()).String()
		} else {
			m[v.Type().Field(i).Name] = f.Interface()
		}
	}
	return json.Marshal(m)
}

// UnmarshalJSON reads what MarshalJSON writes.
func (c *Config) UnmarshalJSON(b []byte) error {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(b, &m); err != nil {
		return err
	}
	v := reflect.ValueOf(c).Elem()
	for i := range v.NumField() {
		raw, ok := m[v.Type().Field(i).Name]
		if !ok {
			continue
		}
		f := v.Field(i)
		if f.Type() == durationType {
			var s string
			if err := json.Unmarshal(raw, &s); err != nil {
				return err
			}
			d, err := time.ParseDuration(s)
			if err != nil {
				return err
			}
			f.SetInt(int64(d))
			continue
		}
		if err := json.Unmarshal(raw, f.Addr().Interface()); err != nil {
			return err
		}
	}
	return nil
}
