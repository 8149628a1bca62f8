-- Expected verdict: CE. Syntax error (error 1064): GROUP without BY.
SELECT s.class_name, s.name, SUM(e.score) AS total
FROM students s
JOIN exams e ON e.student_id = s.id
GROUP s.id, s.class_name, s.name
ORDER BY s.class_name, s.name;
