package dogpile

import (
	"reflect"
	"testing"
)

// TestDebugAlarmsAreStatsFields: the page names the counters it marks by
// their Stats field names; a field renamed without its alarm would lose
// its mark silently.
func TestDebugAlarmsAreStatsFields(t *testing.T) {
	st := reflect.TypeFor[Stats]()
	for _, name := range debugAlarms {
		if _, ok := st.FieldByName(name); !ok {
			t.Errorf("alarm %q is no field of Stats", name)
		}
	}
}
