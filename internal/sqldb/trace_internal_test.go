package sqldb

import "testing"

// A statement's span is named by its operation and the table it is about,
// whichever way the SQL was written.
func TestSummarize(t *testing.T) {
	cases := []struct{ query, op, table string }{
		{"SELECT * FROM `users` WHERE id = ? LIMIT 1", "SELECT", "users"},
		{`SELECT * FROM "roles" WHERE id = $1`, "SELECT", "roles"},
		{"SELECT u.id, (SELECT group_concat(ur.role_id) FROM user_roles ur WHERE ur.user_id = u.id) FROM users u WHERE u.id = ?",
			"SELECT", "users"},
		{"SELECT count(*) FROM `roles`", "SELECT", "roles"},
		{"INSERT INTO `roles` (`id`,`name`) VALUES (?,?)", "INSERT", "roles"},
		{`UPDATE "users" SET "status"=$1`, "UPDATE", "users"},
		{"delete from overwrites where channel_id = ?", "DELETE", "overwrites"},
		{"PRAGMA data_version", "PRAGMA", "data_version"},
		{"SELECT * FROM (SELECT v FROM change_log)", "SELECT", ""},
		{"RELEASE SAVEPOINT gh_job; SAVEPOINT gh_job", "RELEASE", ""},
		{"SELECT pg_notify(?, ?)", "SELECT", ""},
		{"", "", ""},
	}
	for _, tc := range cases {
		t.Run(tc.query, func(t *testing.T) {
			if op, table := summarize(tc.query); op != tc.op || table != tc.table {
				t.Errorf("summarize = %q, %q; want %q, %q", op, table, tc.op, tc.table)
			}
		})
	}
}
