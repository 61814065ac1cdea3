//! The language of a schema's arrays: `items`, `prefixItems`, lengths, `uniqueItems` (with
//! `unique.rs`) and `contains`.

use super::*;

impl Compiler<'_> {
    pub(super) fn array(&mut self, m: &Map<String, Value>) -> R<Node> {
        let here = self.here();
        for k in ["contains", "minContains", "maxContains"] {
            if m.contains_key(k) {
                return Err(unsupported(k, &here, "counting matching items"));
            }
        }
        let min = count_keyword(m, "minItems", &here)?.unwrap_or(0);
        let max = count_keyword(m, "maxItems", &here)?;
        let unique = m.get("uniqueItems") == Some(&Value::Bool(true)) && max.is_none_or(|x| x > 1);
        let not_unique = || unsupported("uniqueItems", &here, "items must differ from each other");
        let (prefix, rest): (Vec<Value>, Value) = match (m.get("prefixItems"), m.get("items")) {
            (_, Some(Value::Array(tuple))) => (
                tuple.clone(),
                m.get("additionalItems")
                    .cloned()
                    .unwrap_or(Value::Bool(true)),
            ),
            (Some(Value::Array(p)), items) => (
                p.clone(),
                items
                    .or(m.get("unevaluatedItems"))
                    .cloned()
                    .unwrap_or(Value::Bool(true)),
            ),
            (_, items) => (
                vec![],
                items
                    .or(m.get("unevaluatedItems"))
                    .cloned()
                    .unwrap_or(Value::Bool(true)),
            ),
        };
        let limit = max.map_or(prefix.len(), |x| prefix.len().min(x as usize));
        let mut prefix_nodes = Vec::new();
        for (i, p) in prefix.iter().take(limit).enumerate() {
            let key = if m.contains_key("prefixItems") {
                "prefixItems"
            } else {
                "items"
            };
            prefix_nodes.push(self.at(&format!("{key}/{i}"), |c| c.schema(p))?);
        }
        let rest_node = if max.is_some_and(|x| x as usize <= prefix.len()) {
            Node::Nothing
        } else {
            let key = if prefix.is_empty() {
                "items"
            } else {
                "additionalItems"
            };
            self.at(key, |c| c.schema(&rest))?
        };
        let k = prefix_nodes.len() as u32;
        if unique {
            // Distinct items are regular when they come from a few scalar values.
            let texts = match k {
                0 => unique::scalar_texts(&rest_node).ok_or_else(not_unique)?,
                _ => return Err(not_unique()),
            };
            return unique::unique_lists(&texts, min, max, &self.limits).map_err(|r| {
                Fail::Limit(format!(
                    "`uniqueItems` at {here} over {} values needs more than {} ({r})",
                    texts.len(),
                    r.limit_phrase()
                ))
            });
        }
        let body = if k == 0 {
            Node::list(rest_node, sep(), min, max)
        } else {
            // from(i): items i.. after i items were emitted.
            let mut tail = Node::repeat(
                Node::concat(vec![sep(), rest_node]),
                min.saturating_sub(k),
                max.map(|x| x.saturating_sub(k)),
            );
            for i in (1..k).rev() {
                let step = Node::concat(vec![sep(), prefix_nodes[i as usize].clone(), tail]);
                tail = if i >= min { Node::opt(step) } else { step };
            }
            let first = Node::concat(vec![prefix_nodes[0].clone(), tail]);
            if min == 0 {
                Node::opt(first)
            } else {
                first
            }
        };
        Ok(Node::concat(vec![Node::lit("["), body, Node::lit("]")]))
    }
}
