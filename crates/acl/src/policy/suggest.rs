//! "Did you mean ...?": the nearest of a few known names to one that is not among them.

/// The candidate closest to `name`: one that differs only in letter case first, else the
/// one fewest single-character edits away, if that is at most a third of `name`'s length
/// (at least one edit) — further than that, a suggestion would be a guess. Ties go to the
/// earliest candidate, so the answer does not depend on hashing.
pub fn nearest<'a>(name: &str, candidates: impl IntoIterator<Item = &'a str>) -> Option<&'a str> {
    let limit = (name.chars().count() / 3).max(1);
    let mut best: Option<(usize, &'a str)> = None;
    for candidate in candidates {
        if candidate == name {
            continue;
        }
        if candidate.eq_ignore_ascii_case(name) {
            return Some(candidate);
        }
        let d = edit_distance(name, candidate);
        if d <= limit && best.is_none_or(|(b, _)| d < b) {
            best = Some((d, candidate));
        }
    }
    best.map(|(_, c)| c)
}

/// Levenshtein distance over characters (insert, delete, substitute), one row at a time.
fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut diagonal = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let substitute = diagonal + usize::from(ca != *cb);
            diagonal = row[j + 1];
            row[j + 1] = substitute.min(row[j] + 1).min(row[j + 1] + 1);
        }
    }
    row[b.len()]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn case_first_then_fewest_edits_within_a_third() {
        let fields = ["sip", "sGID", "dGID", "sport", "dport", "lQPN", "dQPN"];
        assert_eq!(nearest("sgid", fields), Some("sGID"));
        assert_eq!(nearest("SPORT", fields), Some("sport"));
        assert_eq!(nearest("spot", fields), Some("sport"));
        assert_eq!(nearest("dQPNs", fields), Some("dQPN"));
        assert_eq!(nearest("tenant", fields), None);
        assert_eq!(
            nearest("sip", fields),
            None,
            "a name is not its own suggestion"
        );
        assert_eq!(edit_distance("kitten", "sitting"), 3);
        assert_eq!(edit_distance("", "abc"), 3);
    }
}
